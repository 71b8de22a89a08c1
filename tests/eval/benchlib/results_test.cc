// The results JSON is read by `kvtier report` and by users' scripts: its key set is a contract.
#include "eval/benchlib/results.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvtier::internal {
namespace {

void Flatten(const nlohmann::json& j, const std::string& prefix, std::set<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out->insert(prefix + k);
      Flatten(v, prefix + k + ".", out);
    }
  } else if (j.is_array() && !j.empty()) {
    Flatten(j[0], prefix + "[].", out);
  }
}

DatapathResult Sample() {
  DatapathResult r;
  r.started_at = "2026-11-29T12:00:00Z";
  r.host = "h";
  r.target = {"file:///nvme/kv", "file", "/nvme/kv/kvtier-bench.1", false, true, true, true,
              "O_DIRECT"};
  r.model_preset = "llama-3.1-8b";
  r.model_id = "meta-llama/Llama-3.1-8B";
  r.layout = "32x8x128 bf16, 256 tokens/chunk";
  r.chunk_tokens = 256;
  r.chunk_bytes = 32ull << 20;
  r.bytes_per_token = 128 << 10;
  r.write = {128, 4ull << 30, 4.0, 0, 0, 0};
  SweepPoint p;
  p.inflight_bytes = 256ull << 20;
  p.kvtier = {128, 4ull << 30, 2.0, 0, 1000, 2000};
  FioResult f;
  f.bytes_per_second = 2.5e9;
  f.bytes = 4ull << 30;
  f.seconds = 1.7;
  f.iodepth = 8;
  f.ioengine = "io_uring";
  f.command = "fio ...";
  p.fio = f;
  p.unverified = PhaseResult{128, 4ull << 30, 1.6, 0, 0, 0};  // verified 2.0 s: 80% of unverified
  p.write = PhaseResult{128, 4ull << 30, 4.0, 0, 0, 0};  // 1.07 GB/s
  p.encrypted_write = PhaseResult{128, 4ull << 30, 5.0, 0, 0, 0};  // 80% of the plain write
  FioResult fw = f;
  fw.bytes_per_second = 2.0e9;  // fio's O_DIRECT writes at the same depth
  p.fio_write = fw;
  p.hit = HitResult{32768, 128, 128, 4ull << 30, 0, 4ull << 30, 4ull << 30, 1.0, 0};
  r.sweep.push_back(p);
  r.serial_pread = PhaseResult{128, 4ull << 30, 8.0, 0, 60000, 70000};
  r.context_tokens = 32768;
  auto gpu = FindGpuProfile("h100");
  EXPECT_TRUE(gpu.ok());
  r.gpu = *gpu;
  return r;
}

// The write row's ratio is kvtier's write bandwidth over fio's at the same point; the summary keeps
// the lowest, and a sweep without a memcpy write reference has none.
TEST(ResultsJsonTest, WriteRatiosAgainstFio) {
  const nlohmann::json j = ToJson(Sample());
  const double want = (4.0 * (1ull << 30) / 4.0) / 2.0e9;
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_write_to_fio"].get<double>(), want);
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_write_to_fio"].get<double>(), want);
  EXPECT_TRUE(j["summary"]["min_ratio_write_to_reference"].is_null());
  EXPECT_TRUE(j["sweep"][0]["ratio_write_to_reference"].is_null());
  EXPECT_NE(FormatSummary(Sample()).find("fio O_DIRECT writes, same depth: 2.00 GB/s"), std::string::npos)
      << FormatSummary(Sample());
}

// Each point's encrypted write is compared with the plain write of the same point; the summary keeps
// the lowest, and a point without an encrypted write has no ratio.
// With the runs' paired ratios present, a point's ratios are their median (the mean of the middle two
// for an even count), not the ratio of the median bandwidths; the summary's lowest follows, and the text
// shows each run's ratio.
TEST(ResultsJsonTest, PairedRunRatiosGiveThePointsRatio) {
  DatapathResult r = Sample();
  r.repeat = 3;
  r.sweep[0].read_ratios_to_fio = {1.10, 0.80, 0.95};
  r.sweep[0].write_ratios_to_fio = {0.79, 0.99, 0.92, 0.90};
  const nlohmann::json j = ToJson(r);
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_to_fio"].get<double>(), 0.95);
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_to_fio"].get<double>(), 0.95);
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_write_to_fio"].get<double>(), 0.91);
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_write_to_fio"].get<double>(), 0.91);
  EXPECT_EQ(j["sweep"][0]["read_ratios_to_fio"].size(), 3u);
  const std::string text = FormatSummary(r);
  EXPECT_NE(text.find("(runs 110, 80, 95%)"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier = 91% (runs 79, 99, 92, 90%)"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(MedianRatio({}), 0);
}

TEST(ResultsJsonTest, EncryptedWriteRatioAtEachPoint) {
  DatapathResult r = Sample();
  SweepPoint second = r.sweep[0];
  second.inflight_bytes *= 2;
  second.encrypted_write->seconds = 8.0;  // half the plain write's rate
  SweepPoint third = r.sweep[0];
  third.encrypted_write.reset();
  r.sweep.push_back(second);
  r.sweep.push_back(third);
  const nlohmann::json j = ToJson(r);
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_encrypted_write_to_plain"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["sweep"][1]["ratio_encrypted_write_to_plain"].get<double>(), 0.5);
  EXPECT_TRUE(j["sweep"][2]["ratio_encrypted_write_to_plain"].is_null());
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_encrypted_write_to_plain"].get<double>(), 0.5);
  EXPECT_NE(FormatSummary(r).find("encrypted write (key_file=, same threads) 0.86 GB/s = 80% of plain"),
            std::string::npos)
      << FormatSummary(r);
}

TEST(ResultsJsonTest, KeySetIsStable) {
  std::set<std::string> keys;
  Flatten(ToJson(Sample()), "", &keys);
  const std::set<std::string> expected = {
      "schema", "started_at", "host", "fio_note", "repeat", "reference_name",
      "target", "target.url", "target.scheme", "target.directory", "target.shared",
      "target.persistent", "target.direct_io", "target.cold", "target.cold_method",
      "model", "model.preset", "model.model_id", "model.layout", "model.chunk_tokens",
      "model.chunk_bytes", "model.bytes_per_token",
      "write", "write.chunks", "write.bytes", "write.seconds", "write.gbps", "write.errors", "write.wrong_bytes",
      "write.p50_us", "write.p99_us", "write.flush_seconds",
      "sweep", "sweep.[].inflight_bytes", "sweep.[].ratio_to_fio", "sweep.[].reference",
      "sweep.[].ratio_to_reference", "sweep.[].kvtier",
      "sweep.[].kvtier.chunks", "sweep.[].kvtier.bytes", "sweep.[].kvtier.seconds",
      "sweep.[].kvtier.gbps", "sweep.[].kvtier.errors", "sweep.[].kvtier.wrong_bytes", "sweep.[].kvtier.p50_us",
      "sweep.[].kvtier.p99_us", "sweep.[].fio", "sweep.[].fio.gbps", "sweep.[].fio.bytes",
      "sweep.[].fio.seconds", "sweep.[].fio.p50_us", "sweep.[].fio.p99_us", "sweep.[].fio.ioengine",
      "sweep.[].fio.iodepth", "sweep.[].fio.memory", "sweep.[].fio.command", "sweep.[].unverified",
      "sweep.[].unverified.chunks", "sweep.[].unverified.bytes", "sweep.[].unverified.seconds",
      "sweep.[].unverified.gbps", "sweep.[].unverified.errors", "sweep.[].unverified.wrong_bytes", "sweep.[].unverified.p50_us",
      "sweep.[].unverified.p99_us", "sweep.[].ratio_verified_to_unverified", "sweep.[].first_pass",
      "sweep.[].write", "sweep.[].write.chunks", "sweep.[].write.bytes", "sweep.[].write.seconds",
      "sweep.[].write.gbps", "sweep.[].write.errors", "sweep.[].write.wrong_bytes", "sweep.[].write.p50_us", "sweep.[].write.p99_us",
      "sweep.[].write.flush_seconds",
      "sweep.[].fio_write", "sweep.[].fio_write.gbps", "sweep.[].fio_write.bytes",
      "sweep.[].fio_write.seconds", "sweep.[].fio_write.p50_us", "sweep.[].fio_write.p99_us",
      "sweep.[].fio_write.ioengine", "sweep.[].fio_write.iodepth", "sweep.[].fio_write.memory",
      "sweep.[].fio_write.command", "sweep.[].ratio_write_to_fio", "sweep.[].write_reference",
      "sweep.[].ratio_write_to_reference", "summary.min_ratio_write_to_fio",
      "sweep.[].read_ratios_to_fio", "sweep.[].write_ratios_to_fio",
      "sweep.[].encrypted_write", "sweep.[].encrypted_write.chunks", "sweep.[].encrypted_write.bytes",
      "sweep.[].encrypted_write.seconds", "sweep.[].encrypted_write.gbps", "sweep.[].encrypted_write.errors", "sweep.[].encrypted_write.wrong_bytes",
      "sweep.[].encrypted_write.p50_us", "sweep.[].encrypted_write.p99_us",
      "sweep.[].ratio_encrypted_write_to_plain", "summary.min_ratio_encrypted_write_to_plain",
      "sweep.[].hit", "sweep.[].hit.tokens", "sweep.[].hit.chunks", "sweep.[].hit.loaded_chunks",
      "sweep.[].hit.bytes_read", "sweep.[].hit.skipped_bytes", "sweep.[].hit.minimum_bytes",
      "sweep.[].hit.naive_bytes", "sweep.[].hit.ratio_to_minimum", "sweep.[].hit.ratio_to_naive",
      "sweep.[].hit.seconds", "sweep.[].hit.errors",
      "summary.min_ratio_write_to_reference", "summary.min_ratio_to_reference",
      "serial_pread", "serial_pread.chunks", "serial_pread.bytes", "serial_pread.seconds",
      "serial_pread.gbps", "serial_pread.errors", "serial_pread.wrong_bytes", "serial_pread.p50_us", "serial_pread.p99_us",
      "memcpy", "memcpy_parallel", "verify_copy", "seal_cpu", "encrypted",
      "summary", "summary.best_inflight_bytes", "summary.gbps", "summary.p50_us", "summary.p99_us",
      "summary.fio_gbps", "summary.ratio_to_fio", "summary.best_fio_gbps",
      "summary.ratio_to_best_fio", "summary.serial_gbps", "summary.speedup_over_serial",
      "summary.reference_gbps", "summary.ratio_to_reference", "summary.min_ratio_to_fio",
      "summary.min_ratio_verified_to_unverified", "summary.ratio_to_memcpy",
      "context", "context.tokens", "context.bytes", "context.load_seconds",
      "verdict", "verdict.estimate", "verdict.profile_kind", "verdict.profile", "verdict.gpu", "verdict.description", "verdict.peak_tflops",
      "verdict.mfu", "verdict.source", "verdict.context_tokens", "verdict.recompute_seconds",
      "verdict.load_seconds", "verdict.ttft_saved_seconds", "verdict.speedup",
      "verdict.break_even_tokens",
  };
  for (const auto& k : expected) EXPECT_TRUE(keys.count(k)) << "missing key " << k;
  for (const auto& k : keys) EXPECT_TRUE(expected.count(k)) << "unexpected key " << k;
}

TEST(ResultsJsonTest, ValuesAreInDecimalGigabytesAndConsistent) {
  const nlohmann::json j = ToJson(Sample());
  EXPECT_EQ(j["schema"], "kvtier.bench.datapath/1");
  const double gbps = j["sweep"][0]["kvtier"]["gbps"].get<double>();
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_verified_to_unverified"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_verified_to_unverified"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["summary"]["min_ratio_to_fio"].get<double>(), j["sweep"][0]["ratio_to_fio"].get<double>());
  EXPECT_DOUBLE_EQ(gbps, static_cast<double>(4ull << 30) / 2.0 / 1e9);
  EXPECT_DOUBLE_EQ(j["sweep"][0]["ratio_to_fio"].get<double>(), gbps / 2.5);
  EXPECT_DOUBLE_EQ(j["summary"]["speedup_over_serial"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["context"]["load_seconds"].get<double>(), 2.0);  // 4 GiB context at 2 GiB/s
  EXPECT_TRUE(j["verdict"]["estimate"].get<bool>());
  EXPECT_TRUE(j["memcpy"].is_null());
  EXPECT_TRUE(j["summary"]["ratio_to_memcpy"].is_null());
}

TEST(ResultsJsonTest, MissingPartsAreNullNotAbsent) {
  DatapathResult r = Sample();
  r.sweep[0].fio.reset();
  r.serial_pread.reset();
  r.gpu.reset();
  const nlohmann::json j = ToJson(r);
  EXPECT_TRUE(j["sweep"][0].contains("fio"));
  EXPECT_TRUE(j["sweep"][0]["fio"].is_null());
  EXPECT_TRUE(j["summary"]["speedup_over_serial"].is_null());
  EXPECT_TRUE(j["verdict"].is_null());
  EXPECT_NE(FormatSummary(r).find("n/a"), std::string::npos);
}

TEST(ResultsJsonTest, SummaryLabelsTheVerdictAsAnEstimate) {
  const std::string text = FormatSummary(Sample());
  EXPECT_NE(text.find("ESTIMATE"), std::string::npos) << text;
  EXPECT_NE(text.find("break-even"), std::string::npos) << text;
  EXPECT_NE(text.find("of fio"), std::string::npos) << text;
}

TEST(ResultsJsonTest, MeasuredProfileIsLabelledMeasured) {
  DatapathResult r = Sample();
  auto h200 = FindGpuProfile("h200");
  ASSERT_TRUE(h200.ok());
  r.gpu = *h200;
  const nlohmann::json j = ToJson(r);
  EXPECT_FALSE(j["verdict"]["estimate"].get<bool>());
  EXPECT_EQ(j["verdict"]["profile_kind"], "measured");
  const std::string text = FormatSummary(r);
  EXPECT_NE(text.find("MEASURED 2026-12-01"), std::string::npos) << text;
  EXPECT_EQ(text.find("ESTIMATE"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvtier::internal
