// Asynchronous loads and saves of the C API: each runs on its store's async threads; the caller waits on
// the operation's condition variable, polls it, or reads its notify descriptor.
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "capi/capi_internal.h"
#include "core/thread_annotations.h"
#include "store/chunk_landing.h"

using kvtier::Status;
using kvtier::internal::CondVar;
using kvtier::internal::Mutex;
using kvtier::internal::MutexLock;
using namespace kvtier::capi;

// One operation. The async thread owns the work fields until it publishes the result; after it sets
// `finished` (under `mu`) it never touches the operation again, so kvtier_op_free may delete it.
// A load's operation is its own LoadProgress: `landed` (under `mu`) says how far each chunk has
// landed, for kvtier_op_wait_bytes. Its waiters need the first bytes of every chunk, so they are woken
// (on `landed_cv`, not `cv`) only when the least landed prefix grows, not on every report: a mem://
// load reports every 2 MiB slice, and waking the waiting thread that often cost loads into host
// memory several percent of their throughput on the development VM (docs/connectors.md).
struct kvtier_op final : kvtier::LoadProgress {
  kvtier_op(kvtier::Store* s, const kvtier::Namespace& n, bool load, int fd)
      : store(s), ns(n), is_load(load), notify_fd(fd) {}

  void Landed(size_t chunk, uint64_t bytes) override {
    MutexLock lock(mu);
    if (landed.Report(chunk, bytes)) landed_cv.NotifyAll();
  }

  // Work, set before the operation is queued and released by the async thread before `done`.
  kvtier::Store* store;
  kvtier::Namespace ns;
  const bool is_load;
  const int notify_fd;
  std::vector<kvtier::ChunkKey> keys;
  std::optional<ChunkBuffers<std::byte>> dst;
  std::optional<ChunkBuffers<const std::byte>> src;

  mutable Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;      // the result below is final
  bool finished GUARDED_BY(mu) = false;  // the notify descriptor was written; the thread is gone
  kvtier_status status GUARDED_BY(mu) = KVTIER_OK;
  std::string message GUARDED_BY(mu);
  size_t count GUARDED_BY(mu) = 0;
  kvtier::internal::LandedPrefixes landed GUARDED_BY(mu);  // loads: per chunk, its bytes verified in place
  CondVar landed_cv;  // the least of `landed` grew, or `done` was set
};

namespace {

// Writes the 8-byte value 1 (an eventfd adds it to its counter). EAGAIN is ignored: a non-blocking
// eventfd whose counter is full already reads as ready.
void Notify(int fd) {
  const uint64_t one = 1;
  while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Run(kvtier_op* op) noexcept {
  Status s;
  size_t count = 0;
  try {
    if (op->is_load) {
      auto r = op->store->LoadWithProgress(op->ns, op->keys, op->dst->chunks, op);
      if (r.ok()) count = *r;
      s = r.status();
    } else {
      s = op->store->Save(op->ns, op->keys, op->src->chunks);
      if (s.ok()) count = op->keys.size();
    }
  } catch (...) {
    s = ExceptionStatus(op->is_load ? "kvtier_load_async" : "kvtier_save_async");
  }
  // The caller's arrays are no longer needed: release them now rather than at kvtier_op_free.
  op->keys = {};
  op->dst.reset();
  op->src.reset();
  std::string message;
  try {
    if (!s.ok()) message = s.ToString();
  } catch (...) {
    // no memory for the message: the status still says what happened
  }
  {
    MutexLock lock(op->mu);
    op->status = static_cast<kvtier_status>(s.code());
    op->message = std::move(message);
    op->count = count;
    op->done = true;
    op->landed_cv.NotifyAll();
  }
  if (op->notify_fd >= 0) Notify(op->notify_fd);
  MutexLock lock(op->mu);
  op->finished = true;
  op->cv.NotifyAll();  // under the lock: a waiter may free the operation as soon as it is released
}

// The leading chunks of a load whose first `want` bytes have landed; once it is done, only chunks it
// loaded (those past the loaded prefix were zeroed).
size_t LeadingLanded(const kvtier_op* op, uint64_t want) REQUIRES(op->mu) {
  const size_t n = op->landed.Leading(want);
  return op->done ? std::min(n, op->count) : n;
}

kvtier_status Submit(const char* fn, bool is_load, kvtier_store* store, const kvtier_ns* ns,
                     const kvtier_key* keys, size_t n_keys, const kvtier_buf* pieces,
                     const size_t* pieces_per_chunk, int notify_fd, kvtier_op** out) {
  return Guard(fn, [&]() -> Status {
    if (out == nullptr) return NullArgument(fn, "out");
    *out = nullptr;
    if (store == nullptr) return NullArgument(fn, "store");
    if (ns == nullptr) return NullArgument(fn, "ns");
    auto op = std::make_unique<kvtier_op>(store->store.get(), ns->ns, is_load, notify_fd);
    KVTIER_ASSIGN_OR_RETURN(op->keys, CopyKeys(fn, keys, n_keys));
    const uint64_t bytes = ns->ns.layout().BytesPerChunk();
    if (is_load) {
      KVTIER_RETURN_IF_ERROR(BuildBuffers(fn, n_keys, pieces, pieces_per_chunk, bytes, op->dst.emplace()));
    } else {
      KVTIER_RETURN_IF_ERROR(BuildBuffers(fn, n_keys, pieces, pieces_per_chunk, bytes, op->src.emplace()));
    }
    if (is_load) {
      MutexLock lock(op->mu);
      op->landed = kvtier::internal::LandedPrefixes(n_keys);
    }
    kvtier_op* raw = op.get();
    store->async->Schedule([raw] { Run(raw); });
    *out = op.release();
    return Status::OK();
  });
}

}  // namespace

extern "C" {

kvtier_status kvtier_load_async(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                size_t n_keys, const kvtier_buf* pieces, const size_t* pieces_per_chunk,
                                int notify_fd, kvtier_op** out) {
  return Submit("kvtier_load_async", true, store, ns, keys, n_keys, pieces, pieces_per_chunk, notify_fd,
                out);
}

kvtier_status kvtier_save_async(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                size_t n_keys, const kvtier_buf* pieces, const size_t* pieces_per_chunk,
                                int notify_fd, kvtier_op** out) {
  return Submit("kvtier_save_async", false, store, ns, keys, n_keys, pieces, pieces_per_chunk, notify_fd,
                out);
}

int kvtier_op_done(const kvtier_op* op) {
  if (op == nullptr) {
    (void)Fail(NullArgument("kvtier_op_done", "op"));
    return 0;
  }
  MutexLock lock(op->mu);
  return op->done ? 1 : 0;
}

kvtier_status kvtier_op_wait(kvtier_op* op, int64_t timeout_ms) {
  const char* fn = "kvtier_op_wait";
  kvtier_status result = KVTIER_OK;
  const kvtier_status waited = Guard(fn, [&]() -> Status {
    if (op == nullptr) return NullArgument(fn, "op");
    MutexLock lock(op->mu);
    if (timeout_ms < 0) {
      while (!op->finished) op->cv.Wait(op->mu);
    } else {
      // Capped at about 100 years, so that the deadline cannot overflow the clock.
      const int64_t ms = std::min<int64_t>(timeout_ms, int64_t{100} * 365 * 24 * 3600 * 1000);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      while (!op->finished) {
        if (!op->cv.WaitUntil(op->mu, deadline) && !op->finished) {
          return Status::Busy(std::string(fn) + ": not done after " + std::to_string(timeout_ms) + " ms");
        }
      }
    }
    result = op->status;
    if (result != KVTIER_OK) SetLastError(op->message);  // already "<code name>: <message>"
    return Status::OK();
  });
  return waited != KVTIER_OK ? waited : result;
}

kvtier_status kvtier_op_wait_bytes(kvtier_op* op, uint64_t bytes, int64_t timeout_ms, size_t* ready) {
  const char* fn = "kvtier_op_wait_bytes";
  return Guard(fn, [&]() -> Status {
    if (ready == nullptr) return NullArgument(fn, "ready");
    *ready = 0;
    if (op == nullptr) return NullArgument(fn, "op");
    if (!op->is_load) return Status::InvalidArgument(std::string(fn) + ": the operation is a save");
    const uint64_t want = std::min<uint64_t>(bytes, op->ns.layout().BytesPerChunk());
    // Capped at about 100 years, so that the deadline cannot overflow the clock.
    const int64_t ms = std::clamp<int64_t>(timeout_ms, 0, int64_t{100} * 365 * 24 * 3600 * 1000);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    MutexLock lock(op->mu);
    while (!op->done && LeadingLanded(op, want) < op->landed.size()) {
      if (timeout_ms < 0) {
        op->landed_cv.Wait(op->mu);
      } else if (!op->landed_cv.WaitUntil(op->mu, deadline) && !op->done &&
                 LeadingLanded(op, want) < op->landed.size()) {
        *ready = LeadingLanded(op, want);
        return Status::Busy(std::string(fn) + ": not landed after " + std::to_string(timeout_ms) + " ms");
      }
    }
    *ready = LeadingLanded(op, want);
    return Status::OK();
  });
}

size_t kvtier_op_count(const kvtier_op* op) {
  if (op == nullptr) {
    (void)Fail(NullArgument("kvtier_op_count", "op"));
    return 0;
  }
  MutexLock lock(op->mu);
  return op->done ? op->count : 0;
}

const char* kvtier_op_error(const kvtier_op* op) {
  if (op == nullptr) {
    (void)Fail(NullArgument("kvtier_op_error", "op"));
    return "";
  }
  MutexLock lock(op->mu);
  return op->done ? op->message.c_str() : "";  // final once done: valid until kvtier_op_free
}

void kvtier_op_free(kvtier_op* op) {
  if (op == nullptr) return;
  {
    MutexLock lock(op->mu);
    while (!op->finished) op->cv.Wait(op->mu);
  }
  delete op;
}

}  // extern "C"
