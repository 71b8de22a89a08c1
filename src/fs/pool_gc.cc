#include "fs/pool_gc.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "fs/pool_layout.h"
#include "fs/pool_walk.h"
#include "io/fd.h"

namespace kvtier::internal {
namespace {

int64_t ToNs(const struct timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

int64_t RecencyNs(const struct stat& st) { return std::max(ToNs(st.st_mtim), ToNs(st.st_atim)); }

int64_t NowNs() {
  struct timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ToNs(t);
}

struct Candidate {
  std::string path;
  uint64_t bytes;
  int64_t recency_ns;
  ino_t ino;
};

// Holds the pool's gc lock for the life of the object.
Result<Fd> LockPool(const PoolLayout& layout) {
  const std::string path = layout.GcLockPath();
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Status::Busy("another kvtier gc is running on " + layout.root());
    return Status::FromErrno(errno, "flock " + path);
  }
  return fd;
}

bool Unlink(const std::string& path, bool dry_run) {
  return dry_run || ::unlink(path.c_str()) == 0 || errno == ENOENT;
}

class GcPass {
 public:
  GcPass(const PoolLayout& layout, const GcOptions& options, const std::function<void(const GcAction&)>& fn)
      : layout_(layout), options_(options), on_action_(fn), now_ns_(NowNs()) {}

  Status Scan() {
    return WalkPool(layout_, [this](const PoolEntry& e) {
      if (e.kind == PoolEntryKind::kChunk) {
        chunks_.push_back({e.path, static_cast<uint64_t>(e.st.st_size), RecencyNs(e.st), e.st.st_ino});
        report_.chunks_scanned++;
        report_.chunk_bytes_scanned += static_cast<uint64_t>(e.st.st_size);
      } else if (e.kind == PoolEntryKind::kTemp) {
        VisitTemp(e);
      }
      return true;
    });
  }

  void Evict() {
    uint64_t total = report_.chunk_bytes_scanned + report_.live_temp_bytes;
    uint64_t chunks_left = chunks_.size();
    if (total > options_.max_bytes) {
      std::sort(chunks_.begin(), chunks_.end(), [](const Candidate& a, const Candidate& b) {
        return a.recency_ns != b.recency_ns ? a.recency_ns < b.recency_ns : a.path < b.path;
      });
      for (const Candidate& c : chunks_) {
        if (total <= options_.max_bytes) break;
        if (EvictOne(c)) {
          total -= c.bytes;
          --chunks_left;
        }
      }
    }
    report_.bytes_after = total;
    report_.chunks_after = chunks_left;
  }

  const GcReport& report() const { return report_; }

 private:
  void VisitTemp(const PoolEntry& e) {
    const int64_t idle_ns = now_ns_ - ToNs(e.st.st_mtim);
    const uint64_t bytes = static_cast<uint64_t>(e.st.st_size);
    if (idle_ns <= options_.grace.count() * 1'000'000'000 || !Unlink(e.path, options_.dry_run)) {
      report_.live_temps++;
      report_.live_temp_bytes += bytes;
      return;
    }
    report_.temps_removed++;
    report_.temp_bytes_removed += bytes;
    Report({e.path, bytes, GcReason::kStaleTemp, idle_ns / 1'000'000'000});
  }

  // True when the chunk no longer counts: evicted now, or already gone.
  bool EvictOne(const Candidate& c) {
    struct stat st;
    if (::lstat(c.path.c_str(), &st) != 0) return errno == ENOENT;
    if (st.st_ino != c.ino || RecencyNs(st) != c.recency_ns) {
      report_.skipped_in_use++;  // read or rewritten since the scan: not least recently used after all
      return false;
    }
    if (!Unlink(c.path, options_.dry_run)) return false;
    report_.chunks_evicted++;
    report_.bytes_evicted += c.bytes;
    Report({c.path, c.bytes, GcReason::kEvict, (now_ns_ - c.recency_ns) / 1'000'000'000});
    return true;
  }

  void Report(const GcAction& a) {
    if (on_action_) on_action_(a);
  }

  const PoolLayout& layout_;
  const GcOptions& options_;
  const std::function<void(const GcAction&)>& on_action_;
  const int64_t now_ns_;
  std::vector<Candidate> chunks_;
  GcReport report_;
};

}  // namespace

std::string_view GcReasonName(GcReason reason) {
  return reason == GcReason::kEvict ? "evict" : "stale-temp";
}

Result<GcReport> CollectPoolGarbage(const std::string& root, const GcOptions& options,
                                    const std::function<void(const GcAction&)>& on_action) {
  const PoolLayout layout(root);
  KVTIER_RETURN_IF_ERROR(OpenPool(layout, /*create=*/false));
  Fd lock;
  if (!options.dry_run) {
    KVTIER_ASSIGN_OR_RETURN(lock, LockPool(layout));
  }
  GcPass pass(layout, options, on_action);
  KVTIER_RETURN_IF_ERROR(pass.Scan());
  pass.Evict();
  const GcReport& r = pass.report();
  if (!options.dry_run) {
    const PoolUsage usage{r.bytes_after, r.chunks_after, static_cast<int64_t>(::time(nullptr))};
    (void)WritePoolUsage(layout, usage);  // only feeds usage estimates; gc itself succeeded
  }
  return r;
}

}  // namespace kvtier::internal
