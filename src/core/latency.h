// A lock-free latency histogram: log-spaced buckets of microseconds, atomically counted.
// Record() may be called from many threads; Summary() reads a consistent-enough snapshot.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "kvtier/tier.h"

namespace kvtier::internal {

class LatencyHistogram {
 public:
  void Record(double micros);
  LatencySummary Summary() const;

 private:
  // 8 sub-buckets per power of two from 1 us to ~2^40 us: relative error under 10%.
  static constexpr int kSub = 8;
  static constexpr int kBuckets = 41 * kSub;
  static int BucketOf(double micros);
  static double BucketUpper(int bucket);

  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> max_ns_{0};
};

// Measures the time from construction to destruction into a histogram.
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram* h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~ScopedLatency() {
    h_->Record(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
                   .count());
  }
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  LatencyHistogram* h_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvtier::internal
