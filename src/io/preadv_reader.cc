// The fallback reader: each chunk is opened, read whole with preadv into an aligned buffer, verified
// and copied out, on the caller's thread and a pool of helper threads. Bytes in flight are bounded by a
// ByteBudget shared by every call (payload bytes: k chunks' worth runs k chunks). Buffers are cached
// up to what the budget can hold at once, so steady reads allocate nothing.
#include <algorithm>
#include <atomic>

#include "core/thread_annotations.h"
#include "io/byte_budget.h"
#include "io/read_common.h"
#include "io/readers.h"
#include "io/thread_pool.h"

namespace kvtier::internal {
namespace {

class PreadvReader final : public ChunkReader {
 public:
  explicit PreadvReader(const ReaderOptions& o)
      : options_(o), budget_(o.max_inflight_bytes), buffers_(BounceMemoryCap(o.max_inflight_bytes)),
        pool_(o.fallback_threads == 0 ? 1 : o.fallback_threads), verify_pool_(MakeVerifyPool(o)) {}

  void ReadMany(std::span<ChunkRead> reads) override;
  std::string_view engine() const override { return options_.direct_io ? "preadv+O_DIRECT" : "preadv"; }
  Status status() const override {
    if (!pool_.status().ok()) return pool_.status();
    return verify_pool_ ? verify_pool_->status() : Status::OK();
  }
  Stats stats() const override {
    Stats s;
    s.bounce_chunks = chunks_.load(std::memory_order_relaxed);
    s.plain_reads = s.bounce_chunks;
    s.buffer_allocations = buffers_.allocations();
    return s;
  }

 private:
  void ReadOne(ChunkRead& read);

  const ReaderOptions options_;
  ByteBudget budget_;
  BufferPool buffers_;
  ThreadPool pool_;
  std::unique_ptr<ThreadPool> verify_pool_;  // separate from pool_: a reader never waits on its own queue
  std::atomic<uint64_t> chunks_{0};
};

// One batch shared by the caller and its helpers: each claims the next unread chunk.
struct PreadvBatch {
  std::span<ChunkRead> reads;
  std::atomic<size_t> next{0};
  Mutex mu;
  CondVar cv;
  unsigned helpers_running GUARDED_BY(mu) = 0;
};

void PreadvReader::ReadMany(std::span<ChunkRead> reads) {
  if (reads.size() <= 1) {
    for (ChunkRead& r : reads) ReadOne(r);
    ZeroFailedReads(reads);
    return;
  }
  PreadvBatch batch;
  batch.reads = reads;
  auto drain = [this, &batch] {
    for (size_t i; (i = batch.next.fetch_add(1)) < batch.reads.size();) ReadOne(batch.reads[i]);
  };
  const unsigned helpers =
      static_cast<unsigned>(std::min<size_t>(reads.size() - 1, pool_.size()));
  {
    MutexLock lock(batch.mu);  // before any helper runs; taken to keep one rule for helpers_running
    batch.helpers_running = helpers;
  }
  for (unsigned h = 0; h < helpers; ++h) {
    pool_.Schedule([&batch, drain] {
      drain();
      MutexLock lock(batch.mu);
      if (--batch.helpers_running == 0) batch.cv.NotifyAll();
    });
  }
  drain();
  MutexLock lock(batch.mu);
  while (batch.helpers_running != 0) batch.cv.Wait(batch.mu);
  ZeroFailedReads(reads);
}

void PreadvReader::ReadOne(ChunkRead& read) {
  chunks_.fetch_add(1, std::memory_order_relaxed);
  ReadChunkSync(read, options_, budget_, buffers_, verify_pool_.get());
}

}  // namespace

std::unique_ptr<ChunkReader> MakePreadvReader(const ReaderOptions& options) {
  return std::make_unique<PreadvReader>(options);
}

}  // namespace kvtier::internal
