#include "tiers/fs/pool_gc.h"

#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "core/chunk_format.h"
#include "tiers/fs/pool_layout.h"
#include "io/chunk_io.h"
#include "io/fd.h"

namespace kvtier::internal {
namespace {

int64_t ToNs(const struct timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

int64_t RecencyNs(const FileStat& st) { return std::max(st.mtime_ns, st.atime_ns); }

// The largest file a chunk can be (the chunk format's payload bound, header and padding).
constexpr uint64_t kMaxChunkFileBytes = (4ull << 30) + 2 * kChunkHeaderSize;

bool PossibleChunkFile(const FileStat& st) {
  return st.type == FileType::kRegular && st.size >= kChunkHeaderSize && st.size % kChunkAlign == 0 &&
         st.size <= kMaxChunkFileBytes;
}

int64_t NowNs() {
  struct timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ToNs(t);
}

struct Candidate {
  WalkEntry entry;
  int64_t recency_ns;
  EvictionList segment = EvictionList::kWindow;
};

// A reader refreshes mtime on a hit; a write leaves mtime within moments of the file's creation.
constexpr int64_t kReadSinceWrittenNs = 1'000'000'000;

EvictionList SegmentOf(const FileStat& st) {
  return st.btime_ns != 0 && st.mtime_ns - st.btime_ns > kReadSinceWrittenNs ? EvictionList::kMain
                                                                              : EvictionList::kWindow;
}

bool OlderFirst(const Candidate& a, const Candidate& b) {
  return a.recency_ns != b.recency_ns ? a.recency_ns < b.recency_ns : a.entry.rel < b.entry.rel;
}

// Holds the pool's gc lock for the life of the object.
Result<Fd> LockPool(ChunkDir& pool) {
  KVTIER_ASSIGN_OR_RETURN(Fd fd, pool.fs().OpenLockFile(kPoolGcLockName));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Status::Busy("another kvtier gc is running on " + pool.root());
    return Status::FromErrno(errno, "flock " + pool.Describe(kPoolGcLockName));
  }
  return fd;
}

class GcPass {
 public:
  GcPass(ChunkDir& pool, const GcOptions& options, const std::function<void(const GcAction&)>& fn)
      : pool_(pool), options_(options), on_action_(fn), now_ns_(NowNs()) {}

  Status Scan() {
    return pool_.Walk(
        [this](const WalkEntry& e) {
          if (e.kind == EntryKind::kChunk) {
            VisitChunk(e);
          } else if (e.kind == EntryKind::kTemp) {
            VisitTemp(e);
          }
          return true;
        },
        &report_.skipped);
  }

  void Evict() {
    uint64_t total = report_.chunk_bytes_scanned + report_.live_temp_bytes;
    uint64_t chunks_left = chunks_.size();
    if (total > options_.max_bytes) {
      std::sort(chunks_.begin(), chunks_.end(), OlderFirst);
      if (options_.policy == EvictionPolicy::kWindow) {
        EvictBySegment(total, chunks_left);
      } else {
        for (const Candidate& c : chunks_) {
          if (total <= options_.max_bytes) break;
          if (EvictOne(c)) {
            total -= c.entry.stat.size;
            --chunks_left;
          }
        }
      }
    }
    report_.bytes_after = total;
    report_.chunks_after = chunks_left;
  }

  const GcReport& report() const { return report_; }

 private:
  // policy=window: the candidates (oldest first) split into the window and main, each evicted in
  // recency order, the list to take from chosen by SegmentToEvict as mem:// chooses.
  void EvictBySegment(uint64_t& total, uint64_t& chunks_left) {
    std::vector<const Candidate*> lists[2];
    SegmentState st;
    st.capacity = options_.max_bytes;
    for (const Candidate& c : chunks_) {
      lists[static_cast<size_t>(c.segment)].push_back(&c);
      (c.segment == EvictionList::kMain ? st.main_used : st.window_used) += c.entry.stat.size;
    }
    size_t next[2] = {0, 0};
    while (total > options_.max_bytes) {
      const auto age = [&](EvictionList s) {
        const size_t i = static_cast<size_t>(s);
        return next[i] < lists[i].size() ? static_cast<uint64_t>(now_ns_ - lists[i][next[i]]->recency_ns) : 0;
      };
      st.window_tail_age = age(EvictionList::kWindow);
      st.main_tail_age = age(EvictionList::kMain);
      size_t seg = static_cast<size_t>(SegmentToEvict(EvictionPolicy::kWindow, st));
      if (next[seg] == lists[seg].size()) seg = 1 - seg;
      if (next[seg] == lists[seg].size()) break;
      const Candidate& c = *lists[seg][next[seg]++];
      (seg == static_cast<size_t>(EvictionList::kMain) ? st.main_used : st.window_used) -= c.entry.stat.size;
      if (EvictOne(c)) {
        total -= c.entry.stat.size;
        --chunks_left;
      }
    }
  }

  bool Remove(const WalkEntry& e) {
    if (options_.dry_run) return true;
    const Status s = pool_.RemoveEntry(e);
    if (!s.ok() && !s.IsNotFound()) report_.remove_failed++;
    return s.ok();
  }

  void VisitChunk(const WalkEntry& e) {
    if (!PossibleChunkFile(e.stat)) {
      // No chunk has this size or type: corrupt, and never counted against the pool.
      if (Remove(e)) {
        report_.corrupt_removed++;
        Report({pool_.Describe(e.rel), e.stat.size, GcReason::kCorrupt, 0, ChunkId{}});
      }
      return;
    }
    // Sizes come from the verified header, never from st_size alone: a chunk-named file whose header
    // does not decode, names another chunk or disagrees with the file's size (a sparse 2 GiB file,
    // say) is corrupt. Counted against the pool it would make gc evict good chunks to make room.
    const auto header = ReadChunkHeader(pool_.fs(), e.rel, e.id);
    if (!header.ok()) {
      if (header.status().IsCorruption() && Remove(e)) {
        report_.corrupt_removed++;
        Report({pool_.Describe(e.rel), e.stat.size, GcReason::kCorrupt, 0, ChunkId{}});
      } else if (!header.status().IsCorruption() && !header.status().IsNotFound()) {
        report_.unverified++;  // a newer format or unreadable: neither counted nor evicted
      }
      return;
    }
    // A modification time in the future buys no more than "used just now".
    chunks_.push_back({e, std::min(RecencyNs(e.stat), now_ns_), SegmentOf(e.stat)});
    report_.chunks_scanned++;
    report_.chunk_bytes_scanned += e.stat.size;
  }

  void VisitTemp(const WalkEntry& e) {
    const uint64_t bytes = e.stat.size;
    if (!IsStaleTemp(*e.temp, e.stat.mtime_ns, now_ns_, options_.grace) || !Remove(e)) {
      report_.live_temps++;
      report_.live_temp_bytes += bytes;
      return;
    }
    report_.temps_removed++;
    report_.temp_bytes_removed += bytes;
    const int64_t idle_ns = std::max<int64_t>(0, now_ns_ - e.stat.mtime_ns);
    Report({pool_.Describe(e.rel), bytes, GcReason::kStaleTemp, idle_ns / 1'000'000'000, ChunkId{}});
  }

  // True when the chunk no longer counts: evicted now, or already gone.
  bool EvictOne(const Candidate& c) {
    auto st = pool_.fs().Stat(c.entry.rel);
    if (!st.ok()) return st.status().IsNotFound();
    // Rewritten (another inode) or touched by a reader (mtime, tier.touch_s) since the scan. Not atime:
    // the scan's own header read may have moved it (relatime).
    if (st->inode != c.entry.stat.inode || st->mtime_ns != c.entry.stat.mtime_ns) {
      report_.skipped_in_use++;  // read or rewritten since the scan: not least recently used after all
      return false;
    }
    if (!Remove(c.entry)) return false;
    report_.chunks_evicted++;
    report_.bytes_evicted += c.entry.stat.size;
    Report({pool_.Describe(c.entry.rel), c.entry.stat.size, GcReason::kEvict,
            std::max<int64_t>(0, now_ns_ - c.recency_ns) / 1'000'000'000, c.entry.id});
    return true;
  }

  void Report(const GcAction& a) {
    if (on_action_) on_action_(a);
  }

  ChunkDir& pool_;
  const GcOptions& options_;
  const std::function<void(const GcAction&)>& on_action_;
  const int64_t now_ns_;
  std::vector<Candidate> chunks_;
  GcReport report_;
};

}  // namespace

std::string_view GcReasonName(GcReason reason) {
  switch (reason) {
    case GcReason::kEvict: return "evict";
    case GcReason::kStaleTemp: return "stale-temp";
    case GcReason::kCorrupt: return "corrupt";
  }
  return "unknown";
}

Result<GcReport> CollectPoolGarbage(ChunkDir& pool, const GcOptions& options,
                                    const std::function<void(const GcAction&)>& on_action) {
  if (!options.dry_run && pool.read_only()) return Status::InvalidArgument("gc needs a pool opened for writing");
  Fd lock;
  if (!options.dry_run) {
    KVTIER_ASSIGN_OR_RETURN(lock, LockPool(pool));
  }
  GcPass pass(pool, options, on_action);
  KVTIER_RETURN_IF_ERROR(pass.Scan());
  pass.Evict();
  const GcReport& r = pass.report();
  if (!options.dry_run) {
    const PoolUsage usage{r.bytes_after, r.chunks_after, static_cast<int64_t>(::time(nullptr))};
    (void)WritePoolUsage(pool, usage);  // only feeds usage estimates; gc itself succeeded
  }
  return r;
}

Result<GcReport> CollectPoolGarbage(const std::string& root, const GcOptions& options,
                                    const std::function<void(const GcAction&)>& on_action) {
  KVTIER_ASSIGN_OR_RETURN(auto pool, OpenPool(root, ChunkDirOptions{.read_only = options.dry_run, .create = false}));
  return CollectPoolGarbage(*pool, options, on_action);
}

}  // namespace kvtier::internal
