// OrderedBatches: the host side of a GPU load. The batches of one request are read (Store::Load into
// pinned staging, verified there) on a thread pool, several at once, and handed to the calling thread
// in batch order, which queues each one on the GPU. A memory tier copies and checks a chunk on one
// thread, so reading batches in parallel is what lets the host keep up with the GPU's copies.
//
// Batch b covers chunks [b*batch, min((b+1)*batch, chunks)) and uses staging slot b % slots:
//  - read(b, slot, first, count) runs on a pool thread. It must first make sure the slot is free (the
//    GPU path waits there on the slot's event) and then read into it; it returns the leading chunks read.
//  - consume(b, slot, first, count, loaded) runs on the calling thread, in order b = 0, 1, ..., once
//    read(b) is done and loaded > 0.
//  - Batch b + slots is scheduled into the same slot only after consume(b) has returned, so a slot is
//    never read into while its previous batch is consumed.
// The first read that fails or loads fewer than its count ends the request: later batches already read
// are dropped (never consumed) and the others never start. Run returns only when no read it started is
// still running.
// Thread-safety: Run may be called by one thread at a time per pool user; read runs on pool threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "io/thread_pool.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct BatchPlan {
  size_t chunks = 0;
  uint32_t batch = 1;  // chunks per batch, > 0
  uint32_t slots = 1;  // staging slots, > 0: at most this many batches are read or waiting at once
};

using BatchReadFn = std::function<Result<size_t>(size_t batch, uint32_t slot, size_t first, uint32_t count)>;
using BatchConsumeFn =
    std::function<Status(size_t batch, uint32_t slot, size_t first, uint32_t count, uint32_t loaded)>;

// The chunks consumed (the request's verified prefix), or the first error, in batch order, of a read
// or a consume.
Result<size_t> RunOrderedBatches(ThreadPool& pool, const BatchPlan& plan, const BatchReadFn& read,
                                 const BatchConsumeFn& consume);

}  // namespace kvtier::internal
