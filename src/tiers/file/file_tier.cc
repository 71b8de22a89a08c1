#include "tiers/file/file_tier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <unordered_set>
#include <vector>

#include "core/latency.h"
#include "core/tier_counters.h"
#include "core/thread_annotations.h"
#include "tiers/file/file_index.h"
#include "tiers/file/file_scan.h"

namespace kvtier::internal {
namespace {

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class FileTier final : public Tier {
 public:
  FileTier(FileTierOptions options, std::string url)
      : options_(std::move(options)), url_(std::move(url)) {}

  Status Init();
  const std::string& url() const override { return url_; }
  TierCapabilities capabilities() const override {
    TierCapabilities c;
    c.persistent = true;
    c.direct_io = options_.reader.direct_io;
    c.read_only = options_.read_only;
    return c;
  }
  bool Contains(const ChunkId& id) override;
  Status Put(const ChunkId& id, GatherList payload) override;
  Status Get(const ChunkId& id, ScatterList dst) override;
  void GetMany(std::span<ReadOp> ops) override;
  Status GetRanges(const ChunkId& id, uint64_t chunk_bytes, std::span<const ByteRange> ranges,
                   ScatterList dst) override;
  Status Remove(const ChunkId& id) override;
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override;
  Status Check(const ChunkInfo& info) override;
  Status Flush() override;
  TierStats Stats() const override;
  Status DescribeNamespace(const Digest& ns, std::string_view text) override {
    return dir_->WriteNamespaceFile(ns, text);
  }
  Result<std::string> NamespaceDescription(const Digest& ns) override { return dir_->ReadNamespaceFile(ns); }

  const FileTierReport& report() const { return report_; }

 private:
  static ChunkId IdOf(const IndexKey& k) { return ChunkId{k.ns, k.key, 0}; }
  std::string PathOf(const IndexKey& k) const { return dir_->ChunkPath(IdOf(k)); }
  void RemoveFile(const IndexKey& k) {
    if (!options_.read_only) (void)dir_->RemoveChunk(IdOf(k));
  }
  void UnlinkVictims(const std::vector<IndexKey>& victims);
  // Looks `id` up, makes it most recently used, and returns its path and generation (0 = miss).
  uint64_t Lookup(const ChunkId& id, std::string* path);
  // Accounts for one finished read and removes what failed verification. Returns the Get status.
  Status AfterRead(const ChunkId& id, uint64_t generation, const ChunkRead& read);
  void DropIfSameGeneration(const ChunkId& id, uint64_t generation, bool unlink_file) EXCLUDES(mu_);
  // Unlinks the files of `keys` (already out of the index, `bytes` of them counted as unlinking) with
  // the lock released, so Gets and Puts of other chunks go on meanwhile; a Put of one of these keys
  // waits for it. Holds the lock again on return.
  void UnlinkOutsideLock(const std::vector<IndexKey>& keys, uint64_t bytes) REQUIRES(mu_);
  void RefreshMtime(const ChunkId& id, uint64_t generation);

  FileTierOptions options_;  // reader.direct_io settled by Init, then constant
  const std::string url_;
  std::unique_ptr<ChunkDir> dir_;
  std::unique_ptr<ChunkReader> reader_;
  FileTierReport report_;

  mutable Mutex mu_;
  std::unique_ptr<FileIndex> index_ PT_GUARDED_BY(mu_);  // set by Init
  std::unordered_set<IndexKey, IndexKeyHash> writing_ GUARDED_BY(mu_);
  std::unordered_set<IndexKey, IndexKeyHash> unlinking_ GUARDED_BY(mu_);  // files being unlinked
  CondVar unlinked_cv_;  // an unlink outside the lock finished

  TierCounters counters_;
};

Status FileTier::Init() {
  KVTIER_ASSIGN_OR_RETURN(dir_, ChunkDir::Open(options_.dir, FileDirSpec(),
                                               ChunkDirOptions{.read_only = options_.read_only, .fs = options_.fs}));
  if (options_.repair) {
    options_.capacity_bytes = UINT64_MAX;  // a repair removes what fails verification, nothing else
  } else if (options_.capacity_bytes == 0) {
    options_.capacity_bytes = kDefaultFileCapacity;
  }
  index_ = std::make_unique<FileIndex>(options_.capacity_bytes);
  options_.reader.direct_io = options_.reader.direct_io && dir_->ProbeDirectIo();
  reader_ = ChunkReader::Create(options_.reader);
  KVTIER_RETURN_IF_ERROR(reader_->status());  // e.g. verify_threads=64 under a process limit
  report_.io_engine = std::string(reader_->engine());
  report_.read_only = options_.read_only;

  KVTIER_ASSIGN_OR_RETURN(ScanResult scan, ScanChunkDir(*dir_));
  report_.temp_removed = scan.temp_removed;
  report_.corrupt_found = scan.corrupt_found;
  report_.corrupt_removed = scan.corrupt_removed;
  report_.newer_skipped = scan.newer_skipped;
  report_.links_skipped = scan.skipped.links;
  report_.special_skipped = scan.skipped.special;
  report_.foreign_skipped = scan.skipped.foreign;
  std::vector<IndexKey> victims;
  {
    MutexLock lock(mu_);
    for (const ScannedChunk& c : scan.chunks) {
      index_->Insert(IndexKey::Of(c.id), IndexEntry{c.stored_bytes, c.id.layout_fingerprint, 0, 0});
    }
    // Only a writer enforces its capacity; looking never evicts.
    if (!options_.read_only) index_->TrimToCapacity(&victims);
  }
  UnlinkVictims(victims);
  report_.open_evictions = victims.size();
  counters_.evictions += victims.size();
  return Status::OK();
}

void FileTier::UnlinkVictims(const std::vector<IndexKey>& victims) {
  for (const IndexKey& k : victims) RemoveFile(k);
}

bool FileTier::Contains(const ChunkId& id) {
  MutexLock lock(mu_);
  return index_->Find(IndexKey::Of(id)) != nullptr;
}

Status FileTier::Put(const ChunkId& id, GatherList payload) {
  if (options_.read_only) return Status::NotSupported("Put refused: " + url_ + " is opened read-only");
  const uint64_t stored = StoredChunkBytes(TotalBytes(payload));
  if (stored > options_.capacity_bytes) {
    ++counters_.put_errors;
    return Status(Code::kNoSpace, "chunk of " + FormatBytes(stored) + " exceeds the capacity of " + url_,
                  false);
  }
  const IndexKey key = IndexKey::Of(id);
  std::vector<IndexKey> victims;
  uint64_t victim_bytes = 0;
  {
    MutexLock lock(mu_);
    for (;;) {
      if (index_->Find(key) != nullptr || writing_.count(key) != 0) return Status::OK();
      // Our own file must not be published before an unlink of the same name in flight lands.
      if (unlinking_.count(key) != 0) {
        unlinked_cv_.Wait(mu_);
        continue;
      }
      if (index_->MakeRoom(stored, &victims, &victim_bytes)) break;
      if (index_->unlinking() == 0) {
        ++counters_.put_errors;
        return Status::NoSpace("file tier " + url_ + " is full of chunks being written");
      }
      unlinked_cv_.Wait(mu_);  // room is being freed by other writers' unlinks
    }
    writing_.insert(key);
    counters_.evictions += victims.size();
    if (victims.empty()) index_->Reserve(stored);
  }
  if (!victims.empty()) {
    // Outside the lock: a slow unlink (a busy disk, a network filesystem) delays only this Put. The
    // victims' bytes stay counted until their files are gone, then turn into this Put's reservation.
    MutexLock lock(mu_);
    UnlinkOutsideLock(victims, victim_bytes);
    index_->Reserve(stored);
  }
  for (const IndexKey& v : victims) NotifyEvicted(ChunkId{v.ns, v.key, 0});
  // Plain chunks from aligned memory (the mem:// arena) go down with O_DIRECT where reads do: no
  // page-cache copy of bytes that the memory tier already holds.
  auto written = dir_->WriteChunk(
      id, payload,
      WriteOptions{.sync = options_.sync, .direct = options_.reader.direct_io,
                   .io_uring = options_.reader.use_io_uring, .cipher = options_.reader.cipher});
  MutexLock lock(mu_);
  index_->Unreserve(stored);
  writing_.erase(key);
  if (!written.ok()) {
    ++counters_.put_errors;
    return written.status();
  }
  index_->Insert(key, IndexEntry{stored, id.layout_fingerprint, 0, NowSeconds()});
  ++counters_.puts;
  counters_.bytes_written += stored;
  return Status::OK();
}

uint64_t FileTier::Lookup(const ChunkId& id, std::string* path) {
  const IndexKey key = IndexKey::Of(id);
  MutexLock lock(mu_);
  IndexEntry* e = index_->Touch(key);
  if (e == nullptr) return 0;
  *path = PathOf(key);
  return e->generation;
}

void FileTier::DropIfSameGeneration(const ChunkId& id, uint64_t generation, bool unlink_file) {
  const IndexKey key = IndexKey::Of(id);
  MutexLock lock(mu_);
  const IndexEntry* e = index_->Find(key);
  if (e == nullptr) return;
  const uint64_t bytes = e->stored_bytes;
  if (!index_->Erase(key, generation) || !unlink_file || options_.read_only) return;
  index_->Unlinking(bytes);
  UnlinkOutsideLock({key}, bytes);
}

void FileTier::UnlinkOutsideLock(const std::vector<IndexKey>& keys, uint64_t bytes) {
  for (const IndexKey& k : keys) unlinking_.insert(k);
  mu_.Unlock();  // the caller's MutexLock holds it again on return, as it expects
  UnlinkVictims(keys);
  mu_.Lock();
  for (const IndexKey& k : keys) unlinking_.erase(k);
  index_->Unlinked(bytes);
  unlinked_cv_.NotifyAll();
}

void FileTier::RefreshMtime(const ChunkId& id, uint64_t generation) {
  if (options_.read_only) return;  // looking changes nothing, not even recency
  const int64_t now = NowSeconds();
  {
    MutexLock lock(mu_);
    IndexEntry* e = index_->Find(IndexKey::Of(id));
    if (e == nullptr || e->generation != generation || e->mtime_touched_s >= now) return;
    e->mtime_touched_s = now;
  }
  dir_->TouchChunk(id);  // best effort: only LRU order after restart
}

Status FileTier::AfterRead(const ChunkId& id, uint64_t generation, const ChunkRead& read) {
  const Status& s = read.status;
  if (s.ok()) {
    ++counters_.hits;
    counters_.bytes_read += TotalBytes(read.dst);
    RefreshMtime(id, generation);
    return s;
  }
  ++counters_.misses;
  if (s.IsCorruption()) {
    ++counters_.corrupt;
    DropIfSameGeneration(id, generation, /*unlink_file=*/true);
  } else if (s.IsNotFound()) {
    // Removed behind our back, or replaced by a link (skipped and kept): forget it, remove nothing.
    DropIfSameGeneration(id, generation, /*unlink_file=*/false);
  } else if (s.code() == Code::kVersionMismatch) {
    return Status::NotFound(s.message());  // a newer kvtier's chunk: not ours to read or remove
  }
  return s;
}

Status FileTier::Get(const ChunkId& id, ScatterList dst) {
  ScopedLatency timer(&counters_.get_latency);
  ChunkRead read;
  read.fs = &dir_->fs();
  const uint64_t generation = Lookup(id, &read.path);
  if (generation == 0) {
    ++counters_.misses;
    return Status::NotFound("chunk " + id.key.Hex() + " not in " + url_);
  }
  read.expected = id;
  read.dst = dst;
  reader_->ReadMany({&read, 1});
  return AfterRead(id, generation, read);
}

Status FileTier::GetRanges(const ChunkId& id, uint64_t chunk_bytes, std::span<const ByteRange> ranges,
                           ScatterList dst) {
  KVTIER_RETURN_IF_ERROR(CheckByteRanges(ranges, chunk_bytes, TotalBytes(dst)));
  ScopedLatency timer(&counters_.get_latency);
  std::string path;
  const uint64_t generation = Lookup(id, &path);
  if (generation == 0) {
    ++counters_.misses;
    return Status::NotFound("chunk " + id.key.Hex() + " not in " + url_);
  }
  Result<uint64_t> read = ReadChunkRanges(dir_->fs(), path, id, chunk_bytes, options_.reader.cipher.get(), ranges, dst);
  if (read.ok()) {
    ++counters_.hits;
    counters_.bytes_read += *read - kChunkHeaderSize;  // payload bytes read, as Get counts them
    RefreshMtime(id, generation);
    return Status::OK();
  }
  const Status s = read.status();
  if (!s.IsNotFound()) {
    for (const auto& d : dst) std::fill(d.begin(), d.end(), std::byte{0});
  }
  ChunkRead failed;
  failed.status = s;
  return AfterRead(id, generation, failed);
}

void FileTier::GetMany(std::span<ReadOp> ops) {
  BatchLatency timer(&counters_.get_latency, ops.size());
  std::vector<ChunkRead> reads;
  std::vector<size_t> op_of;
  std::vector<uint64_t> generations;
  reads.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    ChunkRead read;
    read.fs = &dir_->fs();
    const uint64_t generation = Lookup(ops[i].id, &read.path);
    if (generation == 0) {
      ++counters_.misses;
      ops[i].status = Status::NotFound("chunk " + ops[i].id.key.Hex() + " not in " + url_);
      continue;
    }
    read.expected = ops[i].id;
    read.dst = ops[i].dst;
    read.progress = ops[i].progress;
    reads.push_back(std::move(read));
    op_of.push_back(i);
    generations.push_back(generation);
  }
  reader_->ReadMany(reads);
  for (size_t j = 0; j < reads.size(); ++j) {
    ops[op_of[j]].status = AfterRead(ops[op_of[j]].id, generations[j], reads[j]);
  }
}

Status FileTier::Remove(const ChunkId& id) {
  if (options_.read_only) return Status::NotSupported("Remove refused: " + url_ + " is opened read-only");
  DropIfSameGeneration(id, 0, /*unlink_file=*/true);
  return Status::OK();
}

Status FileTier::List(const std::function<bool(const ChunkInfo&)>& fn) {
  std::vector<ChunkInfo> all;
  {
    MutexLock lock(mu_);
    all = index_->Snapshot();
  }
  for (const ChunkInfo& info : all) {
    if (!fn(info)) break;
  }
  return Status::OK();
}

Status FileTier::Check(const ChunkInfo& info) {
  std::string path;
  uint64_t generation;
  {
    const IndexKey key = IndexKey::Of(info.id);
    MutexLock lock(mu_);
    IndexEntry* e = index_->Find(key);
    if (e == nullptr) return Status::NotFound("chunk " + info.id.key.Hex() + " not in " + url_);
    generation = e->generation;
    path = PathOf(key);
  }
  auto header = VerifyChunkFile(dir_->fs(), path, info.id, options_.reader.cipher.get());
  if (header.ok()) return Status::OK();
  const Status s = header.status();
  if (s.IsCorruption() && !options_.read_only) {
    ++counters_.corrupt;
    DropIfSameGeneration(info.id, generation, /*unlink_file=*/false);
    const Status removed = dir_->RemoveChunk(info.id);  // OK when already gone
    if (!removed.ok()) {
      return Status::IOError(s.message() + "; the corrupt chunk could not be removed: " + removed.ToString());
    }
  } else if (s.IsCorruption()) {
    ++counters_.corrupt;
  } else if (s.IsNotFound()) {
    DropIfSameGeneration(info.id, generation, /*unlink_file=*/false);
  }
  return s;
}

Status FileTier::Flush() {
  // Puts without sync=true reach the disk at the kernel's pace; Flush makes them durable now.
  return options_.read_only ? Status::OK() : dir_->fs().SyncAll();
}

TierStats FileTier::Stats() const {
  TierStats s;
  s.url = url_;
  counters_.FillInto(s);
  MutexLock lock(mu_);
  s.chunks = index_->size();
  s.usage_bytes = index_->usage();
  s.capacity_bytes = index_->capacity();
  return s;
}

}  // namespace

Result<FileTierOptions> ParseFileTierUrl(const TierUrl& url) {
  KVTIER_RETURN_IF_ERROR(url.CheckKnown({"capacity", "sync", "direct", "inflight", "key_file", "verify_threads"}));
  FileTierOptions o;
  o.dir = url.path;
  if (o.dir.empty()) {
    return Status::InvalidArgument("file:// needs a directory, e.g. file:///var/lib/kvtier");
  }
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, url.GetSize("capacity", 0));
  KVTIER_ASSIGN_OR_RETURN(o.sync, url.GetBool("sync", false));
  KVTIER_ASSIGN_OR_RETURN(o.reader.direct_io, url.GetBool("direct", true));
  KVTIER_ASSIGN_OR_RETURN(o.reader.max_inflight_bytes, url.GetSize("inflight", 256ull << 20));
  KVTIER_ASSIGN_OR_RETURN(uint64_t verify_threads, url.GetUint("verify_threads", DefaultVerifyThreads(), 64));
  o.reader.verify_threads = static_cast<unsigned>(verify_threads);
  if (url.params.count("capacity") != 0 && o.capacity_bytes == 0) {
    return Status::InvalidArgument("file:// capacity must be positive");
  }
  if (o.reader.max_inflight_bytes == 0) return Status::InvalidArgument("file:// inflight must be positive");
  if (auto k = url.params.find("key_file"); k != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.reader.cipher, ChunkCipher::FromKeyFile(k->second));
  }
  return o;
}

Result<std::unique_ptr<Tier>> OpenFileTier(const FileTierOptions& options) {
  TierUrl url;
  url.scheme = "file";
  url.path = options.dir;
  if (options.capacity_bytes != 0) url.params["capacity"] = std::to_string(options.capacity_bytes);
  auto tier = std::make_unique<FileTier>(options, url.ToString());
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<Tier>(std::move(tier));
}

Result<std::unique_ptr<Tier>> OpenFileTier(const TierUrl& url, const TierOpenOptions& open) {
  KVTIER_ASSIGN_OR_RETURN(FileTierOptions options, ParseFileTierUrl(url));
  options.read_only = open.read_only;
  options.reader.host_allocator = open.host_allocator;  // the bounce slab's memory (e.g. pinned)
  auto tier = std::make_unique<FileTier>(options, url.ToString());
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<Tier>(std::move(tier));
}

FileTierReport GetFileTierReport(const Tier& tier) {
  const auto* f = dynamic_cast<const FileTier*>(&tier);
  return f == nullptr ? FileTierReport{} : f->report();
}

ChunkDirSpec FileDirSpec() {
  ChunkDirSpec spec;
  spec.kind = "kvtier-file";
  spec.marker = std::string(kFileDirMarker);
  spec.version = 1;
  spec.fanout_levels = 1;
  // What earlier builds wrote into a file:// directory before it carried a marker.
  spec.legacy_entry = [](std::string_view name, FileType type) {
    if (type == FileType::kDirectory) return IsLowerHex(name, 64);
    if (type != FileType::kRegular) return false;
    auto legacy_final = [](std::string_view n) { return n == "kvtier.capacity" || n == ".direct-probe"; };
    return name == "kvtier.capacity" || ParseTempName(name, legacy_final).has_value();
  };
  return spec;
}

Status CorruptFileChunkForTesting(const std::string& dir, const ChunkId& id) {
  KVTIER_ASSIGN_OR_RETURN(auto d, ChunkDir::Open(dir, FileDirSpec(), ChunkDirOptions{.read_only = true}));
  return d->CorruptChunkForTesting(id, kChunkHeaderSize);
}

std::string FileChunkPathForTesting(const std::string& dir, const ChunkId& id) {
  return dir + "/" + ChunkRelPath(FileDirSpec(), id);
}

}  // namespace kvtier::internal
