#include "core/latency.h"

#include <algorithm>
#include <cmath>

namespace kvtier::internal {

int LatencyHistogram::BucketOf(double micros) {
  if (!(micros > 1.0)) return 0;
  int exp = 0;
  const double mant = std::frexp(micros, &exp);  // micros = mant * 2^exp, mant in [0.5, 1)
  const int sub = static_cast<int>((mant - 0.5) * 2 * kSub);
  return std::min(kBuckets - 1, (exp - 1) * kSub + sub);
}

double LatencyHistogram::BucketUpper(int bucket) {
  const int exp = bucket / kSub + 1, sub = bucket % kSub;
  return std::ldexp(0.5 + (sub + 1) / (2.0 * kSub), exp);
}

namespace {

// Index in kLatencyBucketBounds of the first bound >= `micros`, or its size (+Inf).
size_t FixedBucketOf(double micros) {
  size_t i = 0;
  while (i < kLatencyBucketBounds.size() && !(micros <= kLatencyBucketBounds[i] * 1e6)) ++i;
  return i;
}

}  // namespace

void LatencyHistogram::Record(double micros) {
  counts_[BucketOf(micros)].fetch_add(1, std::memory_order_relaxed);
  fixed_[FixedBucketOf(micros)].fetch_add(1, std::memory_order_relaxed);
  const uint64_t ns = static_cast<uint64_t>(std::max(0.0, micros) * 1000.0);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t cur = max_ns_.load(std::memory_order_relaxed);
  while (ns > cur && !max_ns_.compare_exchange_weak(cur, ns, std::memory_order_relaxed)) {
  }
}

LatencySummary LatencyHistogram::Summary() const {
  std::array<uint64_t, kBuckets> c{};
  uint64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) total += c[i] = counts_[i].load(std::memory_order_relaxed);
  LatencySummary s;
  s.count = total;
  if (total == 0) return s;
  s.max_us = static_cast<double>(max_ns_.load(std::memory_order_relaxed)) / 1000.0;
  auto quantile = [&](double q) {
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += c[i];
      if (seen >= std::max<uint64_t>(rank, 1)) return std::min(BucketUpper(i), s.max_us);
    }
    return s.max_us;
  };
  s.p50_us = quantile(0.50);
  s.p90_us = quantile(0.90);
  s.p99_us = quantile(0.99);
  return s;
}

LatencyBuckets LatencyHistogram::Buckets() const {
  LatencyBuckets b;
  uint64_t total = 0;
  for (size_t i = 0; i < fixed_.size(); ++i) {
    total += fixed_[i].load(std::memory_order_relaxed);
    b.cumulative[i] = total;
  }
  b.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return b;
}

}  // namespace kvtier::internal
