#include "io/seal_spread.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "core/thread_annotations.h"
#include "io/thread_pool.h"

namespace kvtier::internal {
namespace {

unsigned SealCores() {
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return cores;
}

// One thread per core but the writer's, at most 7; made at the first spread, never destroyed (a
// writer may still seal while static objects are destroyed at exit). Null in a child forked after it
// was made: the child has none of its threads, so a task queued there would never run.
ThreadPool* SealHelperPool() {
  static const pid_t owner = getpid();
  static ThreadPool* pool = new ThreadPool(std::clamp(SealCores() - 1, 1u, 7u));
  return getpid() == owner ? pool : nullptr;
}

std::atomic<unsigned> g_sealing_threads{0};  // writers in SealSpread and helpers taken for them
std::atomic<uint64_t> g_helper_pieces{0};

// What the writer and its helpers share: helpers may still touch it after the writer returned.
struct SpreadState {
  SpreadState(size_t n, size_t helpers, const std::function<Status(size_t)>* fn)
      : pieces(n), next(helpers + 1), seal(fn), helpers_running(helpers) {}
  const size_t pieces;
  std::atomic<size_t> next;  // the next piece no thread has taken
  const std::function<Status(size_t)>* seal;
  Mutex mu;
  CondVar all_done;
  size_t done GUARDED_BY(mu) = 0;
  // Helpers not yet out of the count of sealing threads: the writer returns only once every helper
  // has left it, so a writer's next spread (its next window) finds the cores its helpers used idle.
  size_t helpers_running GUARDED_BY(mu);
  Status first_error GUARDED_BY(mu);

  // Seals `first` (when below `pieces`), then pieces taken in turn until none is left; a helper then
  // leaves the count of sealing threads.
  void Work(size_t first, bool helper) {
    for (size_t i = first; i < pieces; i = next.fetch_add(1)) {
      Status s = (*seal)(i);
      if (helper) g_helper_pieces.fetch_add(1, std::memory_order_relaxed);
      MutexLock lock(mu);
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
      if (++done == pieces) all_done.NotifyAll();
    }
    if (!helper) return;
    g_sealing_threads.fetch_sub(1);
    MutexLock lock(mu);
    if (--helpers_running == 0) all_done.NotifyAll();
  }
};

// Helpers to take for a writer that is one of `sealing` threads sealing now: the idle cores, at most
// one fewer than the pieces and no more than the pool has.
unsigned HelpersFor(size_t n, unsigned sealing) {
  if (n < 2 || sealing >= SealCores()) return 0;
  const ThreadPool* pool = SealHelperPool();
  if (pool == nullptr) return 0;
  const unsigned idle = SealCores() - sealing;
  return static_cast<unsigned>(std::min<size_t>({idle, n - 1, pool->size()}));
}

}  // namespace

Status SealSpread(size_t n, const std::function<Status(size_t)>& seal) {
  const unsigned sealing = g_sealing_threads.fetch_add(1) + 1;
  const unsigned helpers = HelpersFor(n, sealing);
  if (helpers == 0) {
    g_sealing_threads.fetch_sub(1);
    for (size_t i = 0; i < n; ++i) KVTIER_RETURN_IF_ERROR(seal(i));
    return Status::OK();
  }
  g_sealing_threads.fetch_add(helpers);
  auto state = std::make_shared<SpreadState>(n, helpers, &seal);
  for (unsigned k = 1; k <= helpers; ++k) {
    SealHelperPool()->Schedule([state, k] { state->Work(k, /*helper=*/true); });
  }
  state->Work(0, /*helper=*/false);
  g_sealing_threads.fetch_sub(1);
  MutexLock lock(state->mu);
  while (state->done < n || state->helpers_running > 0) state->all_done.Wait(state->mu);
  return state->first_error;
}

uint64_t PiecesSealedByHelpers() { return g_helper_pieces.load(std::memory_order_relaxed); }

}  // namespace kvtier::internal
