// A lock-free latency histogram: log-spaced buckets of microseconds, atomically counted, for the
// quantiles of Summary(); and the same observations counted at the fixed bounds of
// kLatencyBucketBounds, with their sum, for Buckets() (Prometheus histograms).
// Record() may be called from many threads; Summary() and Buckets() read a consistent-enough snapshot
// (Buckets() is always cumulative: its counts never decrease from one bound to the next).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "kvtier/tier.h"

namespace kvtier::internal {

// Seconds from `t0` to now (steady clock).
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class LatencyHistogram {
 public:
  void Record(double micros);
  LatencySummary Summary() const;
  LatencyBuckets Buckets() const;

 private:
  // 8 sub-buckets per power of two from 1 us to ~2^40 us: relative error under 10%.
  static constexpr int kSub = 8;
  static constexpr int kBuckets = 41 * kSub;
  static int BucketOf(double micros);
  static double BucketUpper(int bucket);

  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> max_ns_{0};
  // Not cumulative: fixed_[i] counts observations in (bound[i-1], bound[i]]; the last one is +Inf.
  std::array<std::atomic<uint64_t>, kLatencyBucketBounds.size() + 1> fixed_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Measures the time from construction to destruction into a histogram (and into `also`, when given).
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram* h, LatencyHistogram* also = nullptr)
      : h_(h), also_(also), start_(std::chrono::steady_clock::now()) {}
  ~ScopedLatency() {
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
    h_->Record(us);
    if (also_ != nullptr) also_->Record(us);
  }
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  LatencyHistogram* h_;
  LatencyHistogram* also_;
  std::chrono::steady_clock::time_point start_;
};

// Measures a batch of `chunks` chunks read together (a Tier's GetMany): each chunk was ready only when
// the batch was, so the batch's time is what each caller saw, and it is recorded once per chunk.
class BatchLatency {
 public:
  BatchLatency(LatencyHistogram* h, size_t chunks)
      : h_(h), chunks_(chunks), start_(std::chrono::steady_clock::now()) {}
  ~BatchLatency() {
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
    for (size_t i = 0; i < chunks_; ++i) h_->Record(us);
  }
  BatchLatency(const BatchLatency&) = delete;
  BatchLatency& operator=(const BatchLatency&) = delete;

 private:
  LatencyHistogram* h_;
  size_t chunks_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvtier::internal
