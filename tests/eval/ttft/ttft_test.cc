// The queueing model, the real-load path on a tiny layout, the fit check and the results of
// `kvtier bench ttft`. Time is a fake clock: every client thread has its own cursor that moves only when
// the client sleeps until its prefill ends, so no assertion depends on how fast this machine is.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <thread>

#include "core/thread_annotations.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "kvtier/store.h"
#include "eval/ttft/plan.h"
#include "eval/ttft/results.h"
#include "eval/ttft/run.h"
#include "eval/ttft/session.h"
#include "eval/ttft/sim_gpu.h"

namespace kvtier::internal {
namespace {

class FakeClock final : public TtftClock {
 public:
  double Now() override {
    MutexLock lock(mu_);
    return at_[std::this_thread::get_id()];
  }
  void SleepUntil(double t) override {
    MutexLock lock(mu_);
    double& at = at_[std::this_thread::get_id()];
    if (t > at) at = t;
  }

 private:
  Mutex mu_;
  std::map<std::thread::id, double> at_ GUARDED_BY(mu_);
};

// A fixed profile: 1e12 FLOP/s for both terms, so seconds = FLOPs / 1e12.
GpuProfile FixedGpu() {
  auto g = FindGpuProfile("a100", 1.0, 1.0);
  EXPECT_TRUE(g.ok());
  return *g;
}

TtftOptions Tiny() {
  TtftOptions o;
  auto m = FindModelPreset("qwen2.5-0.5b");
  EXPECT_TRUE(m.ok());
  o.model = *m;
  o.model.layout.tokens_per_chunk = 16;  // 192 KiB chunks
  o.gpu = FixedGpu();
  o.context_tokens = 64;
  o.turn_tokens = 16;
  o.turns = 1;
  o.min_sessions = 1;
  o.load_batch_chunks = 2;
  return o;
}

std::vector<double> SortedTtfts(const PointResult& p) {
  std::vector<double> v;
  for (const TurnRecord& t : p.turns) v.push_back(t.Ttft());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(SimGpuTest, RunsPrefillsOneAtATimeInOrder) {
  SimGpu gpu;
  const GpuSlot a = gpu.Run(0.0, 1.0);
  const GpuSlot b = gpu.Run(0.0, 1.0);  // ready at once, waits for a
  const GpuSlot c = gpu.Run(5.0, 0.5);  // ready after the GPU went idle: starts when ready
  EXPECT_DOUBLE_EQ(a.start, 0.0);
  EXPECT_DOUBLE_EQ(a.end, 1.0);
  EXPECT_DOUBLE_EQ(b.start, 1.0);
  EXPECT_DOUBLE_EQ(b.end, 2.0);
  EXPECT_DOUBLE_EQ(c.start, 5.0);
  EXPECT_DOUBLE_EQ(c.end, 5.5);
  EXPECT_DOUBLE_EQ(gpu.busy_seconds(), 2.5);
}

// Two clients with equal recompute requests arriving together: one is served at once, the other
// waits for it, so its TTFT is twice the first.
TEST(TtftRunTest, ConcurrencyTwoOfEqualRecomputesQueuesTheSecond) {
  TtftOptions o = Tiny();
  o.min_sessions = 2;
  FakeClock clock;
  const PointResult p = RunPoint(o, "recompute", 2, nullptr, clock, nullptr);
  ASSERT_TRUE(p.error.empty()) << p.error;
  const double one = RecomputeSeconds(o.model, o.gpu, 80);
  ASSERT_GT(one, 0);
  const auto v = SortedTtfts(p);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_DOUBLE_EQ(v[0], one);
  EXPECT_DOUBLE_EQ(v[1], 2 * one);
  const auto rows = SummarizeTtft(o, {p});
  EXPECT_DOUBLE_EQ(rows[0].p50_ms, one * 1e3);
  EXPECT_DOUBLE_EQ(rows[0].p99_ms, 2 * one * 1e3);
  EXPECT_DOUBLE_EQ(rows[0].queue_p50_ms, 0.0);
}

// One client: no queue; each turn recomputes its whole, growing prompt.
TEST(TtftRunTest, RecomputeTurnsComputeTheWholePrompt) {
  TtftOptions o = Tiny();
  o.turns = 3;
  FakeClock clock;
  const PointResult p = RunPoint(o, "recompute", 1, nullptr, clock, nullptr);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.turns.size(), 3u);
  for (const TurnRecord& t : p.turns) {
    EXPECT_DOUBLE_EQ(t.Ttft(), RecomputeSeconds(o.model, o.gpu, 64 + 16 * (t.turn + 1)));
    EXPECT_EQ(t.cached_tokens, 0u);
    EXPECT_DOUBLE_EQ(t.QueueSeconds(), 0.0);
  }
}

Result<std::unique_ptr<Store>> MemStore(const TtftOptions& o, const std::string& mode, uint32_t c) {
  StoreOptions so;
  so.tiers = TtftTierUrls(mode, "/nonexistent", FootprintOf(o, mode, c));
  return Store::Open(so);
}

// Real loads from mem:// (the fake clock sees them take no time): a turn computes only its new tokens
// after the loaded prefix, and saves its new chunks so the next turn loads them too.
TEST(TtftRunTest, LoadedTurnsComputeOnlyTheNewTokens) {
  TtftOptions o = Tiny();
  o.turns = 3;
  auto store = MemStore(o, "mem", 1);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(PopulatePoint(o, "mem", 1, **store).ok());
  FakeClock clock;
  const PointResult p = RunPoint(o, "mem", 1, store->get(), clock, nullptr);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.turns.size(), 3u);
  for (const TurnRecord& t : p.turns) {
    const uint64_t cached = 64 + 16 * t.turn;  // context + earlier turns, all whole chunks here
    EXPECT_EQ(t.cached_tokens, cached) << "turn " << t.turn;
    EXPECT_EQ(t.missing_chunks, 0u);
    EXPECT_EQ(t.load_bytes, cached / 16 * o.model.layout.BytesPerChunk());
    EXPECT_DOUBLE_EQ(t.Ttft(), PrefillSeconds(o.model, o.gpu, cached, 16));
  }
  // The speedup over recompute follows from the model: recompute's p50 over this p50.
  FakeClock clock2;
  const PointResult base = RunPoint(o, "recompute", 1, nullptr, clock2, nullptr);
  const auto rows = SummarizeTtft(o, {base, p});
  ASSERT_TRUE(rows[1].speedup_p50.has_value());
  EXPECT_NEAR(*rows[1].speedup_p50, rows[0].p50_ms / rows[1].p50_ms, 1e-12);
  EXPECT_GT(*rows[1].speedup_p50, 1.0);
  EXPECT_GT(rows[1].load_bytes, 0u);
}

// One point of `o` in file mode, one client, in a folder of its own that is removed afterwards.
PointResult RunFilePoint(const TtftOptions& o) {
  PointResult p;
  char tmpl[] = "/tmp/kvtier-ttft-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    p.error = "mkdtemp failed";
    return p;
  }
  const std::string dir = tmpl;
  {
    StoreOptions so;
    so.tiers = TtftTierUrls("file", dir, FootprintOf(o, "file", 1));
    auto store = Store::Open(so);
    const Status populated = store.ok() ? PopulatePoint(o, "file", 1, **store) : store.status();
    FakeClock clock;
    if (populated.ok()) p = RunPoint(o, "file", 1, store->get(), clock, nullptr);
    else p.error = populated.ToString();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return p;
}

// file:// saves go through the store's background queue: the next turn still finds the chunk its
// previous turn saved.
TEST(TtftRunTest, FileTurnsFindWhatTheirPreviousTurnSaved) {
  TtftOptions o = Tiny();
  o.turns = 3;
  const PointResult p = RunFilePoint(o);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.turns.size(), 3u);
  for (const TurnRecord& t : p.turns) {
    EXPECT_EQ(t.missing_chunks, 0u) << "turn " << t.turn;
    EXPECT_EQ(t.cached_tokens, 64u + 16 * t.turn);
  }
}

// A sliding-window model on file://: each hit reads the window layers' bytes of the chunks that hold
// the last `window` tokens only (the Store's ranged reads), and the results say so beside the naive and
// minimum figures. gpt-oss-20b at 16-token chunks: 12 window layers (window 128) and 12 full layers.
TEST(TtftRunTest, WindowLayersReadOnlyTheirLastTokens) {
  TtftOptions o = Tiny();
  auto m = FindModelPreset("gpt-oss-20b");
  ASSERT_TRUE(m.ok());
  o.model = *m;
  o.model.layout.tokens_per_chunk = 16;
  o.context_tokens = 512;  // 32 chunks; the window needs the last 8
  o.load_batch_chunks = 32;  // one Load per prefix: a Load keeps the window of its own last chunk
  const PointResult p = RunFilePoint(o);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.turns.size(), 1u);
  EXPECT_EQ(p.turns[0].cached_tokens, 512u);
  const uint64_t per_layer = 16 * 2 * 8 * 64 * 2;  // one chunk of one layer: 16 tokens x K,V x 8 x 64 bf16
  EXPECT_EQ(p.turns[0].load_bytes, 32 * 24 * per_layer);
  EXPECT_EQ(p.turns[0].min_bytes, (32 + 8) * 12 * per_layer);  // full layers whole, window layers 128 tokens
  EXPECT_EQ(p.load_bytes_skipped, 24 * 12 * per_layer);       // 24 chunks outside every window
  const std::vector<TtftRow> rows = SummarizeTtft(o, {p});
  EXPECT_EQ(rows[0].read_bytes, rows[0].min_bytes);
  const std::string table = FormatTtftTable(o, rows);
  EXPECT_NE(table.find("KV read 15.00 MiB = 62.5% of the whole chunks (24.00 MiB), 100.0% of the minimum"),
            std::string::npos) << table;
  EXPECT_EQ(TtftJson(o, rows, "t", "h")["rows"][0]["read_bytes"], rows[0].read_bytes);
}

// A saved prefix that is gone (evicted, never saved) is recomputed: nothing loads, the turn pays the
// whole prefill.
TEST(TtftRunTest, MissingPrefixIsRecomputed) {
  TtftOptions o = Tiny();
  auto store = MemStore(o, "mem", 1);
  ASSERT_TRUE(store.ok());
  FakeClock clock;
  const PointResult p = RunPoint(o, "mem", 1, store->get(), clock, nullptr);  // not populated
  ASSERT_EQ(p.turns.size(), 1u);
  EXPECT_EQ(p.turns[0].missing_chunks, 4u);
  EXPECT_EQ(p.turns[0].cached_tokens, 0u);
  EXPECT_DOUBLE_EQ(p.turns[0].Ttft(), RecomputeSeconds(o.model, o.gpu, 80));
}

TtftOptions Llama8k(std::vector<std::string> modes) {
  TtftOptions o;
  auto m = FindModelPreset("llama-3.1-8b");
  EXPECT_TRUE(m.ok());
  o.model = *m;
  o.gpu = FixedGpu();
  o.modes = std::move(modes);
  return o;
}

TEST(TtftPlanTest, FootprintCountsKvAndBuffers) {
  const TtftOptions o = Llama8k({"mem"});  // 8192 + 3 x 256 tokens: 35 chunks of 32 MiB per session
  EXPECT_EQ(SessionChunks(o), 35u);
  const TtftFootprint fp = FootprintOf(o, "mem", 8);
  EXPECT_EQ(fp.sessions, 8u);
  EXPECT_EQ(fp.kv_bytes, 8ull * 35 * (32ull << 20));
  EXPECT_EQ(fp.mem_tier_bytes, 8ull * 35 * (33ull << 20));
  EXPECT_EQ(fp.buffer_bytes, 8ull * 16 * (32ull << 20) + (32ull << 20));
  EXPECT_EQ(fp.disk_bytes, 0u);
  EXPECT_EQ(FootprintOf(o, "recompute", 8).MemoryBytes(), 0u);
  EXPECT_EQ(FootprintOf(o, "mem+file", 8).mem_tier_bytes, fp.mem_tier_bytes / 2);
  EXPECT_GT(FootprintOf(o, "file", 8).disk_bytes, fp.kv_bytes);
}

// Memory for concurrency 4 but not 8: refused, naming the point, the sizes and what would fit.
TEST(TtftPlanTest, RefusesARunThatDoesNotFitAndSaysWhatWould) {
  const TtftOptions o = Llama8k({"mem"});
  const uint64_t need4 = FootprintOf(o, "mem", 4).MemoryBytes();
  const uint64_t memory = need4 + need4 / 9 + 1;  // a tenth is kept free
  const Status s = CheckTtftFits(o, memory, 1ull << 50);
  ASSERT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  const std::string m = s.message();
  EXPECT_NE(m.find("mode mem at concurrency 8"), std::string::npos) << m;
  EXPECT_NE(m.find("of memory"), std::string::npos) << m;
  EXPECT_NE(m.find("--context 8192 up to --concurrency 4"), std::string::npos) << m;
  EXPECT_NE(m.find("--concurrency 1,4,8 up to --context "), std::string::npos) << m;
  EXPECT_TRUE(CheckTtftFits(o, memory * 4, 1ull << 50).ok());
  // The context advice is itself a run that fits.
  const size_t at = m.find("up to --context ") + 16;
  TtftOptions shorter = o;
  shorter.context_tokens = std::stoull(m.substr(at));
  EXPECT_LT(shorter.context_tokens, 8192u);
  EXPECT_TRUE(CheckTtftFits(shorter, memory, 1ull << 50).ok());
}

TEST(TtftPlanTest, RefusesShortDisk) {
  const TtftOptions o = Llama8k({"recompute", "file"});
  const Status s = CheckTtftFits(o, 1ull << 50, 1ull << 30);
  ASSERT_EQ(s.code(), Code::kNoSpace);
  EXPECT_NE(s.message().find("mode file at concurrency 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--dir filesystem has 1.00 GiB free"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckTtftFits(Llama8k({"recompute"}), 0, 0).ok());
}

TEST(TtftPlanTest, ValidatesOptions) {
  TtftOptions o = Llama8k({"mem", "nvme"});
  EXPECT_EQ(ValidateTtft(o).code(), Code::kInvalidArgument);
  o.modes = {"mem"};
  EXPECT_TRUE(ValidateTtft(o).ok());
  o.concurrency = {0};
  EXPECT_EQ(ValidateTtft(o).code(), Code::kInvalidArgument);
  o.concurrency = {1};
  o.context_tokens = 100;  // under one chunk
  EXPECT_EQ(ValidateTtft(o).code(), Code::kInvalidArgument);
}

TEST(TtftResultsTest, PercentilesAreNearestRank) {
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 0.99), 4.0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 0.9), 4.0);
}

// Every output names the profile the compute is modelled from; the key set is the one docs/ttft.md
// lists.
TEST(TtftResultsTest, JsonAndTableNameTheComputeProfile) {
  TtftOptions o = Tiny();
  auto h200 = FindGpuProfile("h200");
  ASSERT_TRUE(h200.ok());
  o.gpu = *h200;
  FakeClock clock;
  const PointResult p = RunPoint(o, "recompute", 1, nullptr, clock, nullptr);
  const auto rows = SummarizeTtft(o, {p});
  const nlohmann::json j = TtftJson(o, rows, "2026-12-01T00:00:00Z", "host");
  EXPECT_EQ(j["schema"], "kvtier.bench.ttft/1");
  EXPECT_NE(j["compute"].get<std::string>().find("MEASURED 2026-12-01"), std::string::npos);
  EXPECT_EQ(j["gpu"]["kind"], "measured");
  for (const char* k : {"schema", "bench", "started_at", "host", "compute", "gpu", "model", "workload",
                        "break_even", "rows"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  ASSERT_EQ(j["rows"].size(), 1u);
  const auto& row = j["rows"][0];
  for (const char* k : {"mode", "concurrency", "sessions", "turns", "ttft_p50_ms", "ttft_p90_ms",
                        "ttft_p99_ms", "speedup_p50", "load_gbps", "aggregate_load_gbps", "load_bytes",
                        "read_bytes", "minimum_bytes", "missing_chunks", "mean_cached_tokens", "queue_p50_ms", "compute_p50_ms",
                        "gpu_busy", "compute"}) {
    EXPECT_TRUE(row.contains(k)) << k;
  }
  EXPECT_EQ(row.size(), 19u);
  EXPECT_EQ(row["compute"], "modelled from GPU profile h200 (measured)");
  EXPECT_TRUE(row["load_gbps"].is_null());
  EXPECT_EQ(j["break_even"][0]["compute"], "modelled from GPU profile h200 (measured)");
  EXPECT_GT(j["break_even"][0]["break_even_gbps"].get<double>(), 0);
  const std::string table = FormatTtftTable(o, rows);
  EXPECT_NE(table.find("compute modelled from GPU profile h200: MEASURED"), std::string::npos) << table;
  EXPECT_NE(table.find("break-even"), std::string::npos) << table;
}

}  // namespace
}  // namespace kvtier::internal
