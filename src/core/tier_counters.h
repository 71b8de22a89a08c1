// The counters every tier keeps for TierStats, in one place: relaxed atomics (they are statistics,
// never used for synchronisation) and a Get latency histogram. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/latency.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct TierCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, bytes_read{0}, bytes_written{0};
  std::atomic<uint64_t> puts{0}, put_errors{0}, evictions{0}, corrupt{0};
  LatencyHistogram get_latency;

  // Copies the counters and the latency summary into `s`; the tier fills url, chunks, usage, capacity.
  void FillInto(TierStats& s) const {
    s.hits = hits.load(std::memory_order_relaxed);
    s.misses = misses.load(std::memory_order_relaxed);
    s.bytes_read = bytes_read.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written.load(std::memory_order_relaxed);
    s.puts = puts.load(std::memory_order_relaxed);
    s.put_errors = put_errors.load(std::memory_order_relaxed);
    s.evictions = evictions.load(std::memory_order_relaxed);
    s.corrupt = corrupt.load(std::memory_order_relaxed);
    s.get_latency = get_latency.Summary();
    s.get_latency_buckets = get_latency.Buckets();
  }
};

}  // namespace kvtier::internal
