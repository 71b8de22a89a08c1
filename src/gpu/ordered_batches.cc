#include "gpu/ordered_batches.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/thread_annotations.h"

namespace kvtier::internal {
namespace {

struct Shared {
  Mutex mu;
  CondVar cv;
  std::vector<std::optional<Result<size_t>>> done GUARDED_BY(mu);
  size_t running GUARDED_BY(mu) = 0;
};

}  // namespace

Result<size_t> RunOrderedBatches(ThreadPool& pool, const BatchPlan& plan, const BatchReadFn& read,
                                 const BatchConsumeFn& consume) {
  if (plan.chunks == 0) return size_t{0};
  if (plan.batch == 0 || plan.slots == 0) return Status::InvalidArgument("batch plan: zero batch or slots");
  const size_t batches = (plan.chunks + plan.batch - 1) / plan.batch;
  auto count = [&](size_t b) {
    return static_cast<uint32_t>(std::min<size_t>(plan.batch, plan.chunks - b * plan.batch));
  };
  Shared sh;
  {
    MutexLock lock(sh.mu);
    sh.done.resize(batches);
  }
  size_t next = 0;  // next batch to schedule
  auto schedule = [&] {
    const size_t b = next++;
    {
      MutexLock lock(sh.mu);
      ++sh.running;
    }
    pool.Schedule([&, b] {
      Result<size_t> r = read(b, static_cast<uint32_t>(b % plan.slots), b * plan.batch, count(b));
      MutexLock lock(sh.mu);
      sh.done[b] = std::move(r);
      --sh.running;
      sh.cv.NotifyAll();
    });
  };
  while (next < std::min<size_t>(plan.slots, batches)) schedule();

  size_t total = 0;
  Status err;
  for (size_t b = 0; b < batches; ++b) {
    std::optional<Result<size_t>> r;
    {
      MutexLock lock(sh.mu);
      sh.cv.Wait(sh.mu, [&]() NO_THREAD_SAFETY_ANALYSIS { return sh.done[b].has_value(); });
      r = std::move(sh.done[b]);
    }
    if (!r->ok()) {
      err = r->status();
      break;
    }
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(**r, count(b)));
    if (n > 0) {
      err = consume(b, static_cast<uint32_t>(b % plan.slots), b * plan.batch, count(b), n);
      if (!err.ok()) break;
    }
    total += n;
    if (n < count(b)) break;
    if (next < batches) schedule();  // into the slot batch b has just left
  }
  // Reads still running write into the caller's slots: wait for them before returning.
  MutexLock lock(sh.mu);
  sh.cv.Wait(sh.mu, [&]() NO_THREAD_SAFETY_ANALYSIS { return sh.running == 0; });
  if (!err.ok()) return err;
  return total;
}

}  // namespace kvtier::internal
