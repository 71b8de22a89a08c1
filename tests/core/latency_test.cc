#include "core/latency.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvtier::internal {
namespace {

// Buckets(): each observation counts in the first fixed bound at or above it (a bound is inclusive,
// like Prometheus' le), cumulatively, with the sum in seconds.
TEST(LatencyTest, BucketsAreCumulativeAtFixedBounds) {
  LatencyHistogram h;
  EXPECT_EQ(h.Buckets().count(), 0u);
  h.Record(50);        // <= 100 us
  h.Record(100);       // exactly the first bound
  h.Record(101);       // <= 250 us
  h.Record(2e6);       // <= 2.5 s
  h.Record(31e6);      // above 30 s: +Inf only
  const LatencyBuckets b = h.Buckets();
  ASSERT_EQ(kLatencyBucketBounds[0], 0.0001);
  EXPECT_EQ(b.cumulative[0], 2u);
  EXPECT_EQ(b.cumulative[1], 3u);
  for (size_t i = 2; i < kLatencyBucketBounds.size(); ++i) {
    EXPECT_EQ(b.cumulative[i], kLatencyBucketBounds[i] >= 2.0 ? 4u : 3u) << "le=" << kLatencyBucketBounds[i];
  }
  EXPECT_EQ(b.cumulative.back(), 5u);
  EXPECT_EQ(b.count(), 5u);
  EXPECT_NEAR(b.sum_seconds, (50 + 100 + 101 + 2e6 + 31e6) / 1e6, 1e-9);
}

TEST(LatencyTest, EmptySummary) {
  LatencyHistogram h;
  const LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.p50_us, 0);
  EXPECT_EQ(s.max_us, 0);
}

TEST(LatencyTest, QuantilesWithinBucketError) {
  LatencyHistogram h;
  for (int i = 1; i <= 1000; ++i) h.Record(i);  // 1..1000 us
  const LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 1000u);
  EXPECT_NEAR(s.p50_us, 500, 500 * 0.1);
  EXPECT_NEAR(s.p90_us, 900, 900 * 0.1);
  EXPECT_NEAR(s.p99_us, 990, 990 * 0.1);
  EXPECT_DOUBLE_EQ(s.max_us, 1000);
  EXPECT_LE(s.p50_us, s.p90_us);
  EXPECT_LE(s.p90_us, s.p99_us);
  EXPECT_LE(s.p99_us, s.max_us);
}

TEST(LatencyTest, QuantilesNeverExceedMax) {
  LatencyHistogram h;
  h.Record(3.1);
  const LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 1u);
  EXPECT_LE(s.p99_us, 3.1 + 1e-9);
  EXPECT_GT(s.p50_us, 2.5);
}

TEST(LatencyTest, TinyNegativeAndHugeValues) {
  LatencyHistogram h;
  h.Record(0);
  h.Record(-5);
  h.Record(1e15);  // beyond the last bucket: clamped, still counted
  const LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 3u);
  EXPECT_LE(s.p50_us, 1.2);  // the first bucket holds everything up to 1 us; its bound is 1.125
  EXPECT_DOUBLE_EQ(s.max_us, 1e15);
}

TEST(LatencyTest, ConcurrentRecordsAreAllCounted) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 5000; ++i) h.Record(10.0 * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  const LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 20000u);
  EXPECT_DOUBLE_EQ(s.max_us, 40);
}

TEST(LatencyTest, ScopedLatencyRecordsOnce) {
  LatencyHistogram h;
  { ScopedLatency timer(&h); }
  EXPECT_EQ(h.Summary().count, 1u);
}

}  // namespace
}  // namespace kvtier::internal
