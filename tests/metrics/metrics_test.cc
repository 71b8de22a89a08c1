// PrometheusText over a Store that loaded, saved, missed and met a corrupt chunk: the text passes the
// strict parser and its numbers are what the test did (hit tokens = tokens loaded, one corrupt chunk,
// one histogram observation per call, ...).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "kvtier/metrics.h"
#include "kvtier/store.h"
#include "metrics/prom_parser.h"

namespace kvtier::testing {
namespace {

Layout Tiny() { return Layout{2, 1, 4, DType::kBF16, 4}; }  // 128 bytes, 4 tokens per chunk

std::vector<ChunkKey> KeysOf(const Namespace& ns, size_t chunks, uint32_t seed) {
  std::vector<uint32_t> tokens(chunks * ns.layout().tokens_per_chunk);
  std::iota(tokens.begin(), tokens.end(), seed * 100000u);
  return ComputeChunkKeys(ns, tokens);
}

Status SaveAll(Store& store, const Namespace& ns, std::span<const ChunkKey> keys) {
  std::vector<std::byte> data(ns.layout().BytesPerChunk(), std::byte{7});
  const std::span<const std::byte> piece(data);
  std::vector<GatherList> srcs(keys.size(), GatherList(&piece, 1));
  return store.Save(ns, keys, srcs);
}

size_t LoadAll(Store& store, const Namespace& ns, std::span<const ChunkKey> keys) {
  std::vector<std::vector<std::byte>> out(keys.size(), std::vector<std::byte>(ns.layout().BytesPerChunk()));
  std::vector<std::span<std::byte>> pieces;
  for (auto& o : out) pieces.emplace_back(o);
  std::vector<ScatterList> dsts;
  for (auto& p : pieces) dsts.emplace_back(&p, 1);
  auto n = store.Load(ns, keys, dsts);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : 0;
}

PromExposition Parse(const std::string& text) {
  auto parsed = ParsePrometheusText(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
  return parsed.ok() ? *parsed : PromExposition{};
}

std::string Label(const Namespace& ns) { return ns.Hex().substr(0, 16); }

class StoreMetricsTest : public ::testing::Test {
 protected:
  void Open(uint32_t queue_chunks = 64) {
    StoreOptions opt;
    opt.tiers = {"mem://?capacity=64KiB&page=64", "file://" + dir_.path() + "?capacity=1MiB"};
    opt.save_queue_chunks = queue_chunks;
    auto s = Store::Open(opt);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  Namespace a_ = *Namespace::Make("test/model", Tiny(), "tenant-a");
  Namespace b_ = *Namespace::Make("test/model", Tiny(), "tenant-b");
  const double bytes_ = static_cast<double>(Tiny().BytesPerChunk());
};

TEST_F(StoreMetricsTest, TextParsesAndCountsWhatTheStoreDid) {
  ASSERT_NO_FATAL_FAILURE(Open());
  // Namespace a: 4 chunks saved, a lookup of 6 finds 4, all 4 load.
  const auto a_keys = KeysOf(a_, 6, 1);
  ASSERT_TRUE(SaveAll(*store_, a_, std::span(a_keys).first(4)).ok());
  ASSERT_TRUE(store_->Flush().ok());
  ASSERT_EQ(store_->Lookup(a_, a_keys), 4u);
  ASSERT_EQ(LoadAll(*store_, a_, std::span(a_keys).first(4)), 4u);
  // Namespace b: a miss, then a chunk found only in the file tier with a flipped byte.
  const auto b_keys = KeysOf(b_, 1, 2);
  ASSERT_EQ(LoadAll(*store_, b_, KeysOf(b_, 2, 3)), 0u);
  ASSERT_TRUE(SaveAll(*store_, b_, b_keys).ok());
  ASSERT_TRUE(store_->Flush().ok());
  const ChunkId bad = ChunkId::Of(b_, b_keys[0]);
  ASSERT_TRUE(store_->tier(0).Remove(bad).ok());
  FlipByte(internal::FileChunkPathForTesting(dir_.path(), bad), internal::kChunkHeaderSize + 5);
  ASSERT_EQ(LoadAll(*store_, b_, b_keys), 0u);

  const StoreStats stats = store_->Stats();
  const PromExposition e = Parse(PrometheusText(stats));
  const PromLabels a = {{"namespace", Label(a_)}}, b = {{"namespace", Label(b_)}};
  const double tokens = Tiny().tokens_per_chunk;
  EXPECT_EQ(e.Value("kvtier_lookups_total", a), 1);
  EXPECT_EQ(e.Value("kvtier_lookup_tokens_total", a), 6 * tokens);
  EXPECT_EQ(e.Value("kvtier_lookup_hit_tokens_total", a), 4 * tokens);
  EXPECT_EQ(e.Value("kvtier_lookup_hit_tokens_total", a), *e.Value("kvtier_load_chunks_total", a) * tokens);
  EXPECT_EQ(e.Value("kvtier_load_bytes_total", a), 4 * bytes_);
  EXPECT_EQ(e.Value("kvtier_loads_total", a), 1);
  EXPECT_EQ(e.Value("kvtier_saves_total", a), 1);
  EXPECT_EQ(e.Value("kvtier_save_chunks_total", a), 4);
  EXPECT_EQ(e.Value("kvtier_loads_total", b), 2);
  EXPECT_EQ(e.Value("kvtier_load_chunks_total", b), 0);
  EXPECT_EQ(e.Value("kvtier_lookups_total", b), 0);
  // One histogram observation per call, per namespace.
  EXPECT_EQ(e.Value("kvtier_load_latency_seconds_count", a), 1);
  EXPECT_EQ(e.Value("kvtier_load_latency_seconds_count", b), 2);
  EXPECT_EQ(e.Value("kvtier_save_latency_seconds_count", b), 1);
  EXPECT_EQ(e.Samples("kvtier_load_latency_seconds_bucket").size(), 2 * (kLatencyBucketBounds.size() + 1));
  // Per tier: the corrupt chunk, and the numbers TierStats holds.
  const PromLabels mem = {{"tier", MetricsTierLabel(stats.tiers[0].url)}};
  const PromLabels file = {{"tier", MetricsTierLabel(stats.tiers[1].url)}};
  EXPECT_EQ(e.Value("kvtier_tier_corrupt_chunks_total", file), 1);
  EXPECT_EQ(e.Value("kvtier_tier_corrupt_chunks_total", mem), 0);
  EXPECT_EQ(e.Value("kvtier_tier_written_bytes_total", file), static_cast<double>(stats.tiers[1].bytes_written));
  EXPECT_GT(stats.tiers[1].bytes_written, 0u);
  // Memory served a's 4 loaded chunks; the 5 background copies wrote from chunks it held for them
  // (Tier::Hold), which is no hit and no read.
  EXPECT_EQ(e.Value("kvtier_tier_hits_total", mem), 4);
  EXPECT_EQ(e.Value("kvtier_tier_read_bytes_total", mem), 4 * bytes_);
  EXPECT_EQ(e.Value("kvtier_tier_chunks", file), static_cast<double>(stats.tiers[1].chunks));
  EXPECT_EQ(e.Value("kvtier_tier_capacity_bytes", file), 1 << 20);
  EXPECT_EQ(e.Value("kvtier_tier_get_latency_seconds_count", mem), static_cast<double>(stats.tiers[0].get_latency.count));
  EXPECT_EQ(e.Value("kvtier_dropped_saves_total"), 0);
  EXPECT_EQ(e.Value("kvtier_save_queue_bytes"), 0);
  EXPECT_EQ(e.Value("kvtier_save_queue_chunks"), 0);
  EXPECT_EQ(e.families.at("kvtier_load_latency_seconds").type, "histogram");
  EXPECT_EQ(e.families.at("kvtier_save_queue_bytes").type, "gauge");
}

TEST_F(StoreMetricsTest, DroppedSavesAreCountedPerTierAndInTotal) {
  ASSERT_NO_FATAL_FAILURE(Open(/*queue_chunks=*/0));  // the queue takes no job: every background save drops
  const auto keys = KeysOf(a_, 3, 1);
  ASSERT_TRUE(SaveAll(*store_, a_, keys).ok());
  const StoreStats stats = store_->Stats();
  const PromExposition e = Parse(PrometheusText(stats));
  EXPECT_EQ(e.Value("kvtier_dropped_saves_total"), 3);
  EXPECT_EQ(e.Value("kvtier_tier_dropped_saves_total", {{"tier", MetricsTierLabel(stats.tiers[1].url)}}), 3);
  EXPECT_EQ(e.Value("kvtier_tier_dropped_saves_total", {{"tier", MetricsTierLabel(stats.tiers[0].url)}}), 0);
}

TEST_F(StoreMetricsTest, NamespacesPastTheLimitShareOther) {
  ASSERT_NO_FATAL_FAILURE(Open());
  const size_t extra = 6, total = NamespaceStats::kMaxTrackedNamespaces + extra;
  for (size_t i = 0; i < total; ++i) {
    const Namespace ns = *Namespace::Make("test/model", Tiny(), "tenant-" + std::to_string(i));
    store_->Lookup(ns, KeysOf(ns, 2, 1));
  }
  const PromExposition e = Parse(PrometheusText(store_->Stats()));
  const auto lookups = e.Samples("kvtier_lookups_total");
  ASSERT_EQ(lookups.size(), NamespaceStats::kMaxTrackedNamespaces + 1);
  EXPECT_EQ(e.Value("kvtier_lookups_total", {{"namespace", "other"}}), extra);
  EXPECT_EQ(e.Value("kvtier_lookup_tokens_total", {{"namespace", "other"}}), extra * 2 * Tiny().tokens_per_chunk);
  const Namespace first = *Namespace::Make("test/model", Tiny(), "tenant-0");
  EXPECT_EQ(e.Value("kvtier_lookups_total", {{"namespace", Label(first)}}), 1);
}

// Label values go through the library's escaping; equal labels are told apart; secrets never appear.
TEST(TierMetricsTest, LabelsAreEscapedUniqueAndWithoutSecrets) {
  std::vector<TierStats> tiers(3);
  tiers[0].url = "file:///tmp/a\"b\\c\nd?capacity=1MiB&key_file=/etc/kvtier.key";
  tiers[1].url = "file:///tmp/a\"b\\c\nd?capacity=1MiB&key_file=/etc/other.key";
  tiers[2].url = "mem://?capacity=1GiB";
  tiers[0].hits = 5;
  tiers[1].hits = 6;
  tiers[2].get_latency_buckets.cumulative.fill(2);
  tiers[2].get_latency_buckets.sum_seconds = 0.5;
  const std::string text = PrometheusText(tiers);
  EXPECT_EQ(text.find("key_file"), std::string::npos);
  EXPECT_EQ(text.find("kvtier.key"), std::string::npos);
  const PromExposition e = Parse(text);
  EXPECT_EQ(e.Value("kvtier_tier_hits_total", {{"tier", "file:///tmp/a\"b\\c\nd?capacity=1MiB#0"}}), 5);
  EXPECT_EQ(e.Value("kvtier_tier_hits_total", {{"tier", "file:///tmp/a\"b\\c\nd?capacity=1MiB#1"}}), 6);
  EXPECT_EQ(e.Value("kvtier_tier_get_latency_seconds_count", {{"tier", "mem://?capacity=1GiB"}}), 2);
  EXPECT_EQ(e.Value("kvtier_tier_get_latency_seconds_sum", {{"tier", "mem://?capacity=1GiB"}}), 0.5);
  EXPECT_EQ(e.Samples("kvtier_lookups_total").size(), 0u);  // tier metrics only
  EXPECT_EQ(PrometheusText(std::span<const TierStats>()), "");
}

}  // namespace
}  // namespace kvtier::testing
