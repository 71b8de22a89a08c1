#include "tiers/fs/pool_publish.h"

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

// link(2) found the name taken (EEXIST), matched by text for the same reason.
bool NameWasTaken(const Status& s) { return s.message().ends_with(std::strerror(EEXIST)); }

// A name that is taken at each link and gone at each look after it is being published and removed
// over and over by others; after this many tries the write fails (the caller may retry it).
constexpr int kLinkAttempts = 8;

Result<Published> LinkChunk(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                            const WriteOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(TempChunk written, WriteChunkTemp(fs, rel, id, payload, options));
  const std::string& tmp = written.rel;
  Status s;
  Published p{.stored_bytes = written.stored_bytes};
  for (int attempt = 1;; ++attempt) {
    const Status linked = fs.Link(tmp, rel);
    if (linked.ok()) break;
    auto ours = fs.Stat(tmp);
    auto there = fs.Stat(rel);
    if (there.ok()) {
      // Taken: by another writer (the first copy stays), or by this link reported late.
      if (!ours.ok() || ours->inode != there->inode) p = Published{.stored_bytes = 0, .already_there = true};
    } else if (NameWasTaken(linked) && attempt < kLinkAttempts) {
      continue;  // taken at the link, removed (gc, Remove) before the stat: the name is free again
    } else if (NoHardLinks(linked)) {
      s = fs.Rename(tmp, rel);  // the old publication
    } else {
      s = linked;
    }
    break;
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
    KVTIER_RETURN_IF_ERROR(MakeChunkParents(pool.fs(), rel));  // first chunk of its directory
    r = LinkChunk(pool.fs(), rel, id, payload, options);
  }
  return r;
}

}  // namespace kvtier::internal
