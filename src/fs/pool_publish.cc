#include "fs/pool_publish.h"

#include <cerrno>
#include <cstring>

#include "io/dir_names.h"

namespace kvtier::internal {
namespace {

// A filesystem without hard links: link(2) fails with EOPNOTSUPP (NotSupported) or EPERM, which
// Status::FromErrno maps to no code of its own, so its text is matched.
bool NoHardLinks(const Status& s) {
  return s.code() == Code::kNotSupported || s.message().ends_with(std::strerror(EPERM));
}

Status MakeParents(FileSystem& fs, std::string_view rel) {
  const std::string_view dir = RelDir(rel);
  for (size_t pos = dir.find('/'); ; pos = dir.find('/', pos + 1)) {
    KVTIER_RETURN_IF_ERROR(fs.MakeDir(dir.substr(0, pos)));
    if (pos == std::string_view::npos) return Status::OK();
  }
}

Result<Published> LinkChunk(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                            const WriteOptions& options) {
  const std::string tmp = JoinRel(RelDir(rel), MakeTempName(RelBase(rel)));
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.CreateNew(tmp));
  auto written = WriteChunkBody(fs, fd.get(), fs.root() + "/" + tmp, id, payload, options);
  Status s = written.status();
  if (fd.Close() != 0 && s.ok()) s = Status::FromErrno(errno, "close " + fs.root() + "/" + tmp);
  Published p;
  if (s.ok()) {
    p.stored_bytes = *written;
    Status linked = fs.Link(tmp, rel);
    if (!linked.ok()) {
      auto ours = fs.Stat(tmp);
      auto there = fs.Stat(rel);
      if (there.ok()) {
        // Taken: by another writer (the first copy stays), or by this link reported late.
        if (!ours.ok() || ours->inode != there->inode) p = Published{.stored_bytes = 0, .already_there = true};
      } else if (NoHardLinks(linked)) {
        s = fs.Rename(tmp, rel);  // the old publication
      } else {
        s = linked;
      }
    }
  }
  (void)fs.Unlink(tmp);  // after a link, the second name; after a rename or failure, nothing or the leftover
  if (!s.ok()) return s;
  if (options.sync && !p.already_there) KVTIER_RETURN_IF_ERROR(fs.SyncDir(RelDir(rel)));
  return p;
}

}  // namespace

Result<Published> PublishChunk(ChunkDir& pool, const ChunkId& id, GatherList payload, const WriteOptions& options) {
  if (pool.read_only()) return Status::NotSupported("write refused: " + pool.root() + " is opened read-only");
  const std::string rel = pool.ChunkPath(id);
  auto r = LinkChunk(pool.fs(), rel, id, payload, options);
  if (!r.ok() && r.status().IsNotFound()) {
    KVTIER_RETURN_IF_ERROR(MakeParents(pool.fs(), rel));  // first chunk of its directory
    r = LinkChunk(pool.fs(), rel, id, payload, options);
  }
  return r;
}

}  // namespace kvtier::internal
