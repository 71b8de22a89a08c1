#include "io/chunk_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>

#include "core/chunk_format.h"

namespace kvtier::internal {
namespace {

// Counts an entry the walk skips, by its type.
void CountSkipped(FileType type, WalkCounts* counts) {
  ++(type == FileType::kSymlink ? counts->links : type == FileType::kOther ? counts->special : counts->foreign);
}

std::string LayoutLine(const ChunkDirSpec& spec) {
  std::string s = spec.chunk_root.empty() ? "" : spec.chunk_root + "/";
  s += "<namespace>/";
  for (int level = 0; level < spec.fanout_levels; ++level) {
    s += "<key[" + std::to_string(2 * level) + ":" + std::to_string(2 * level + 2) + "]>/";
  }
  return s + "<key>.kvc";
}

}  // namespace

std::string EncodeDirMarker(const ChunkDirSpec& spec, uint32_t version) {
  return spec.kind + "\nversion=" + std::to_string(version) + "\nchunks=" + LayoutLine(spec) + "\n";
}

Result<uint32_t> ParseDirMarker(std::string_view text, const ChunkDirSpec& spec, std::string_view root) {
  const std::string where = std::string(root) + "/" + spec.marker;
  const size_t nl = text.find('\n');
  if (text.substr(0, nl) != spec.kind) {
    return Status::Corruption(where + " is not a " + spec.kind + " marker");
  }
  uint64_t version = 0;
  if (!ParseBoundedU64(FindKeyValue(text, "version"), UINT32_MAX, &version) || version == 0) {
    return Status::Corruption(where + " has no valid version");
  }
  if (version > spec.version) {
    return Status::VersionMismatch(std::string(root) + " has format version " + std::to_string(version) +
                                   ", newer than this build of kvtier knows (" + std::to_string(spec.version) +
                                   "); upgrade kvtier on this host or use another directory");
  }
  return static_cast<uint32_t>(version);
}

Result<std::unique_ptr<ChunkDir>> ChunkDir::Open(const std::string& root, ChunkDirSpec spec,
                                                 const ChunkDirOptions& options) {
  std::shared_ptr<FileSystem> fs = options.fs;
  if (!fs) {
    KVTIER_ASSIGN_OR_RETURN(fs, OpenPosixFileSystem(
                                    root, PosixFsOptions{.create = options.create && !options.read_only}));
  }
  if (spec.fanout_levels < 1 || spec.fanout_levels > 4) return Status::InvalidArgument("fan-out depth must be 1 to 4");
  std::unique_ptr<ChunkDir> dir(new ChunkDir(std::move(fs), std::move(spec), options.read_only));
  KVTIER_RETURN_IF_ERROR(dir->Mark(options.create));
  return dir;
}

Status ChunkDir::Mark(bool create) {
  auto st = fs_->Stat(spec_.marker);
  if (st.ok()) {
    if (st->type != FileType::kRegular) {
      return Status::Corruption(Describe(spec_.marker) + " is not a regular file (a link, FIFO or device); "
                                "refusing to use " + root());
    }
    KVTIER_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(spec_.marker, 4096));
    KVTIER_ASSIGN_OR_RETURN(found_version_, ParseDirMarker(text, spec_, root()));
    if (!read_only_) {
      auto entries = fs_->List("");
      if (entries.ok()) RemoveStaleMarkerTemps(*entries);  // a creator killed after publishing
    }
  } else if (!st.status().IsNotFound()) {
    return st.status();
  } else if (!read_only_ && !create) {
    return Status::NotFound("no kvtier tier at " + root() + " (missing " + spec_.marker + ")");
  } else if (read_only_) {
    // An unmarked directory is readable only if earlier builds wrote it (and it holds something).
    KVTIER_RETURN_IF_ERROR(CheckAdoptable());
    found_version_ = 1;
  } else {
    KVTIER_RETURN_IF_ERROR(CheckAdoptable());
    KVTIER_RETURN_IF_ERROR(PublishMarker());
    return Mark(false);
  }
  if (!read_only_ && !spec_.chunk_root.empty()) KVTIER_RETURN_IF_ERROR(fs_->MakeDir(spec_.chunk_root));
  return Status::OK();
}

bool ChunkDir::IsMarkerTemp(const DirEntry& e) const {
  return e.type == FileType::kRegular &&
         ParseTempName(e.name, [this](std::string_view n) { return n == spec_.marker; }).has_value();
}

void ChunkDir::RemoveStaleMarkerTemps(const std::vector<DirEntry>& entries) {
  if (read_only_) return;
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  for (const DirEntry& e : entries) {
    if (!IsMarkerTemp(e)) continue;
    const auto temp = ParseTempName(e.name, [this](std::string_view n) { return n == spec_.marker; });
    auto st = fs_->Stat(e.name);
    if (st.ok() && st->type == FileType::kRegular && IsStaleTemp(*temp, st->mtime_ns, now_ns, kMarkerTempGrace)) {
      (void)fs_->Unlink(e.name);  // a killed creator's half-made marker: ours, and nobody's now
    }
  }
}

Status ChunkDir::CheckAdoptable() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, fs_->List(""));
  const bool creating = !read_only_;
  // Another opener's marker temporary (it is creating the directory right now), or one a killed
  // creator left: kvtier's own, so the directory is still new. Stale ones are cleaned up.
  RemoveStaleMarkerTemps(entries);
  std::erase_if(entries, [this](const DirEntry& e) { return IsMarkerTemp(e); });
  if (entries.empty()) {
    if (creating) return Status::OK();
    return Status::NotFound("no kvtier tier at " + root() + " (the directory has no " + spec_.marker + ")");
  }
  for (const DirEntry& e : entries) {
    if (spec_.legacy_entry && spec_.legacy_entry(e.name, e.type)) continue;
    // Another opener published the marker (and perhaps its first folders) since our Stat: not foreign.
    if (auto st = fs_->Stat(spec_.marker); st.ok() && st->type == FileType::kRegular) return Status::OK();
    return Status::InvalidArgument("directory " + root() + " holds files that are not kvtier's (e.g. '" + e.name +
                                   "') and no " + spec_.marker + " marker; kvtier uses only empty directories "
                                   "or ones it created: point it at a new or empty directory");
  }
  return Status::OK();
}

Status ChunkDir::WriteTextTemp(const std::string& tmp, std::string_view text) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs_->CreateNew(tmp));
  iovec iov{const_cast<char*>(text.data()), text.size()};
  auto wrote = fs_->WriteV(fd.get(), &iov, 1);
  Status s = !wrote.ok() ? wrote.status()
             : *wrote != text.size() ? Status::IOError("short write of " + Describe(tmp))
                                     : fs_->SyncFile(fd.get());
  if (fd.Close() != 0 && s.ok()) s = Status::FromErrno(errno, "close " + Describe(tmp));
  return s;
}

Status ChunkDir::PublishMarker() {
  const std::string tmp = MakeTempName(spec_.marker);
  Status s = WriteTextTemp(tmp, EncodeDirMarker(spec_, spec_.version));
  if (s.ok()) {
    // link() never replaces a marker another process published first (even one of a newer version).
    s = fs_->Link(tmp, spec_.marker);
    if (!s.ok() && s.code() == Code::kNotSupported) s = fs_->Rename(tmp, spec_.marker);
    if (!s.ok() && fs_->Stat(spec_.marker).ok()) s = Status::OK();  // another process marked it first
  }
  (void)fs_->Unlink(tmp);
  return s;
}

Status ChunkDir::RefuseIfReadOnly(std::string_view what) const {
  if (!read_only_) return Status::OK();
  return Status::NotSupported(std::string(what) + " refused: " + root() + " is opened read-only");
}

std::string ChunkRelPath(const ChunkDirSpec& spec, const ChunkId& id) {
  const std::string key = id.key.Hex();
  std::string p = spec.chunk_root;
  if (!p.empty()) p += '/';
  p += DigestHex(id.ns);
  for (int level = 0; level < spec.fanout_levels; ++level) {
    p += '/';
    p.append(key, static_cast<size_t>(level) * 2, 2);
  }
  p += '/';
  p += key;
  p += kChunkSuffix;
  return p;
}

bool ChunkDir::IsOwnTopLevel(const DirEntry& e) const {
  return IsOwnFinalName(e.name) ||
         ParseTempName(e.name, [this](std::string_view n) { return IsOwnFinalName(n); }).has_value() ||
         (spec_.legacy_entry && spec_.legacy_entry(e.name, e.type));
}

bool ChunkDir::IsOwnFinalName(std::string_view name) const {
  if (ParseChunkFileName(name) || name == spec_.marker) return true;
  return std::find(spec_.own_files.begin(), spec_.own_files.end(), name) != spec_.own_files.end();
}

Status MakeChunkParents(FileSystem& fs, std::string_view rel) {
  std::string_view dir = RelDir(rel);
  for (size_t pos = 0; pos != std::string_view::npos;) {
    pos = dir.find('/', pos == 0 ? 0 : pos + 1);
    KVTIER_RETURN_IF_ERROR(fs.MakeDir(dir.substr(0, pos)));
  }
  return Status::OK();
}

Result<TempChunk> WriteChunkTemp(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                                 const WriteOptions& options) {
  TempChunk t{JoinRel(RelDir(rel), MakeTempName(RelBase(rel))), 0};
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs.CreateNew(t.rel));
  auto written = WriteChunkBody(fs, fd.get(), fs.root() + "/" + t.rel, id, payload, options);
  Status s = written.status();
  if (fd.Close() != 0 && s.ok()) s = Status::FromErrno(errno, "close " + fs.root() + "/" + t.rel);
  if (!s.ok()) {
    (void)fs.Unlink(t.rel);
    return s;
  }
  t.stored_bytes = *written;
  return t;
}

Result<uint64_t> WriteChunkFileAtomic(FileSystem& fs, const std::string& rel, const ChunkId& id, GatherList payload,
                                      const WriteOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(TempChunk t, WriteChunkTemp(fs, rel, id, payload, options));
  Status s = fs.Rename(t.rel, rel);
  if (!s.ok()) {
    (void)fs.Unlink(t.rel);  // a failed rename may or may not have moved it: either way nothing is left
    return s;
  }
  if (options.sync) KVTIER_RETURN_IF_ERROR(fs.SyncDir(RelDir(rel)));
  return t.stored_bytes;
}

Result<uint64_t> ChunkDir::WriteChunk(const ChunkId& id, GatherList payload, const WriteOptions& options) {
  KVTIER_RETURN_IF_ERROR(RefuseIfReadOnly("write"));
  const std::string rel = ChunkPath(id);
  auto written = WriteChunkFileAtomic(*fs_, rel, id, payload, options);
  if (!written.ok() && written.status().IsNotFound()) {
    KVTIER_RETURN_IF_ERROR(MakeChunkParents(*fs_, rel));  // first chunk of its directory
    written = WriteChunkFileAtomic(*fs_, rel, id, payload, options);
  }
  return written;
}

Status ChunkDir::RemoveChunk(const ChunkId& id) {
  KVTIER_RETURN_IF_ERROR(RefuseIfReadOnly("remove"));
  Status s = fs_->Unlink(ChunkPath(id));
  return s.IsNotFound() ? Status::OK() : s;
}

Status ChunkDir::RemoveEntry(const WalkEntry& entry) {
  KVTIER_RETURN_IF_ERROR(RefuseIfReadOnly("remove"));
  if (entry.kind != EntryKind::kChunk && entry.kind != EntryKind::kTemp) {
    return Status::InvalidArgument(Describe(entry.rel) + " is not kvtier's to remove");
  }
  Status s = fs_->Unlink(entry.rel);
  return s.IsNotFound() ? Status::OK() : s;
}

void ChunkDir::TouchChunk(const ChunkId& id) {
  if (!read_only_) (void)fs_->Touch(ChunkPath(id));
}

Result<std::string> ChunkDir::ReadSmallFile(std::string_view name, size_t max_bytes) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, fs_->OpenForRead(name, /*direct=*/false));
  std::string out;
  std::byte buf[4096];
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, fs_->ReadAt(fd.get(), buf, sizeof(buf), out.size()));
    if (n == 0) break;
    out.append(reinterpret_cast<const char*>(buf), n);
    if (out.size() > max_bytes) return Status::Corruption(Describe(name) + " is larger than a kvtier file of its kind");
  }
  return out;
}

Status ChunkDir::WriteSmallFile(std::string_view name, std::string_view text) {
  KVTIER_RETURN_IF_ERROR(RefuseIfReadOnly("write"));
  const std::string tmp = MakeTempName(name);
  Status s = WriteTextTemp(tmp, text);
  if (s.ok()) s = fs_->Rename(tmp, name);
  if (!s.ok()) (void)fs_->Unlink(tmp);
  return s;
}

bool ChunkDir::IsNamespaceFileName(std::string_view name) {
  if (name == kNamespaceFile) return true;
  return ParseTempName(name, [](std::string_view n) { return n == kNamespaceFile; }).has_value();
}

Status ChunkDir::WriteNamespaceFile(const Digest& ns, std::string_view text) {
  KVTIER_RETURN_IF_ERROR(RefuseIfReadOnly("describe a namespace"));
  const std::string rel = JoinRel(JoinRel(spec_.chunk_root, DigestHex(ns)), kNamespaceFile);
  auto st = fs_->Stat(rel);
  if (st.ok()) return Status::OK();  // written once: the same id always has the same identity
  if (!st.status().IsNotFound()) return st.status();
  KVTIER_RETURN_IF_ERROR(MakeChunkParents(*fs_, rel));
  return WriteSmallFile(rel, text);
}

Result<std::string> ChunkDir::ReadNamespaceFile(const Digest& ns, size_t max_bytes) {
  const std::string rel = JoinRel(JoinRel(spec_.chunk_root, DigestHex(ns)), kNamespaceFile);
  KVTIER_ASSIGN_OR_RETURN(FileStat st, fs_->Stat(rel));
  if (st.type != FileType::kRegular) return Status::Corruption(Describe(rel) + " is not a regular file");
  return ReadSmallFile(rel, max_bytes);
}

bool ChunkDir::ProbeDirectIo() {
  auto fd = fs_->OpenForRead(spec_.marker, /*direct=*/true);
  if (!fd.ok()) return false;
  AlignedBuffer buf = AlignedBuffer::Allocate(kChunkAlign);
  if (buf.data() == nullptr) return false;
  return fs_->ReadAt(fd->get(), buf.data(), buf.size(), 0).ok();
}

Status ChunkDir::Walk(const std::function<bool(const WalkEntry&)>& fn, WalkCounts* counts) {
  WalkCounts local;
  if (counts == nullptr) counts = &local;
  auto top = fs_->List(spec_.chunk_root);
  if (!top.ok()) {
    if (top.status().IsNotFound() && !spec_.chunk_root.empty()) return Status::OK();  // nothing written yet
    return top.status();
  }
  bool stop = false;
  for (const DirEntry& e : *top) {
    if (stop) break;
    if (IsLowerHex(e.name, 64) && e.type == FileType::kDirectory) {
      const Digest ns = DigestFromHex(e.name).value();
      KVTIER_RETURN_IF_ERROR(WalkNamespace(JoinRel(spec_.chunk_root, e.name), ns, fn, counts, &stop));
    } else if (e.type == FileType::kSymlink || !spec_.chunk_root.empty() || !IsOwnTopLevel(e)) {
      CountSkipped(e.type, counts);
    }
  }
  return Status::OK();
}

Status ChunkDir::WalkNamespace(const std::string& ns_rel, const Digest& ns,
                               const std::function<bool(const WalkEntry&)>& fn, WalkCounts* counts, bool* stop) {
  // Breadth over the fan-out levels: each level is directories named by two hex characters.
  std::vector<std::string> dirs{ns_rel};
  for (int level = 0; level < spec_.fanout_levels; ++level) {
    std::vector<std::string> next;
    for (const std::string& d : dirs) {
      auto entries = fs_->List(d);
      if (!entries.ok()) {
        if (entries.status().IsNotFound()) continue;  // removed meanwhile
        return entries.status();
      }
      for (const DirEntry& e : *entries) {
        if (IsLowerHex(e.name, 2) && e.type == FileType::kDirectory) {
          next.push_back(JoinRel(d, e.name));
        } else if (level == 0 && e.type == FileType::kRegular && IsNamespaceFileName(e.name)) {
          // the namespace's descriptor (or its temporary): kvtier's own, not a chunk
        } else {
          CountSkipped(e.type, counts);
        }
      }
    }
    dirs = std::move(next);
  }
  for (const std::string& leaf : dirs) {
    if (*stop) break;
    KVTIER_RETURN_IF_ERROR(WalkLeaf(leaf, ns, fn, counts, stop));
  }
  return Status::OK();
}

Status ChunkDir::WalkLeaf(const std::string& rel, const Digest& ns, const std::function<bool(const WalkEntry&)>& fn,
                          WalkCounts* counts, bool* stop) {
  auto entries = fs_->List(rel);
  if (!entries.ok()) return entries.status().IsNotFound() ? Status::OK() : entries.status();
  auto is_chunk_name = [](std::string_view n) { return ParseChunkFileName(n).has_value(); };
  for (const DirEntry& d : *entries) {
    WalkEntry e;
    e.rel = JoinRel(rel, d.name);
    // A chunk name counts only where kvtier puts that chunk (its own namespace and fan-out folders).
    const auto key = ParseChunkFileName(d.name);
    if (key && ChunkRelPath(spec_, ChunkId{ns, *key, 0}) == e.rel) {
      e.kind = EntryKind::kChunk;
      e.id.ns = ns;
      e.id.key = *key;
    } else if (auto t = ParseTempName(d.name, is_chunk_name)) {
      e.kind = EntryKind::kTemp;
      e.temp = std::move(t);
    }
    if (d.type == FileType::kSymlink || e.kind == EntryKind::kForeign) {
      CountSkipped(d.type, counts);
      if (e.kind == EntryKind::kForeign) continue;
      e.kind = EntryKind::kLink;
      e.stat.type = FileType::kSymlink;
    } else {
      auto st = fs_->Stat(e.rel);
      if (!st.ok()) continue;  // removed meanwhile
      e.stat = *st;
      if (e.stat.type != FileType::kRegular) {
        ++counts->special;
        if (e.kind == EntryKind::kTemp || e.stat.type == FileType::kDirectory) continue;  // never ours
      }
    }
    if (!fn(e)) {
      *stop = true;
      break;
    }
  }
  return Status::OK();
}

Status ChunkDir::CorruptChunkForTesting(const ChunkId& id, uint64_t offset) {
  const std::string path = Describe(ChunkPath(id));
  Fd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  std::byte b{};
  if (::pread(fd.get(), &b, 1, static_cast<off_t>(offset)) != 1) return Status::IOError("chunk " + path + " too short to damage");
  b ^= std::byte{0xff};
  if (::pwrite(fd.get(), &b, 1, static_cast<off_t>(offset)) != 1) return Status::FromErrno(errno, "write " + path);
  return Status::OK();
}

}  // namespace kvtier::internal
