#include "eval/replay/report.h"

#include <algorithm>
#include <cstdio>

#include "eval/benchlib/datapath_passes.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

double Ratio(uint64_t num, uint64_t den) { return den ? static_cast<double>(num) / den : 0.0; }

double DurationS(const ReplayReport& r) { return r.summary.duration_ms / 1000.0; }

uint64_t ModelBytes(const ReplayReport& r, uint64_t blocks) {
  return blocks * r.scale.ModelBlockBytes();
}

json CapacityJson(const ReplayReport& r, bool unlimited, uint64_t blocks) {
  if (unlimited) return json{{"unlimited", true}, {"tokens", nullptr}, {"bytes", nullptr}};
  return json{{"unlimited", false},
              {"tokens", blocks * r.scale.block_tokens},
              {"bytes", ModelBytes(r, blocks)}};
}

json TierJson(const ReplayReport& r, const ReplayRun& run, const TierReplayResult& t) {
  const double secs = DurationS(r);
  const uint64_t read = ModelBytes(r, t.hit_blocks);
  const uint64_t written = ModelBytes(r, t.stats.puts);
  return json{
      {"url", t.url},
      {"capacity", CapacityJson(r, t.unlimited, t.capacity_blocks)},
      {"hit_blocks", t.hit_blocks},
      {"hit_tokens", t.hit_tokens},
      {"token_hit_ratio", Ratio(t.hit_tokens, run.input_tokens)},
      {"belady_token_hit_ratio", t.belady.TokenHitRatio()},
      {"bytes_read", read},
      {"bytes_written", written},
      {"chunks_written", t.stats.puts},
      {"evictions", t.stats.evictions},
      {"chunks_at_end", t.stats.chunks},
      {"read_bytes_per_s", read / secs},
      {"write_bytes_per_s", written / secs},
      {"scaled_counters",
       {{"bytes_read", t.stats.bytes_read},
        {"bytes_written", t.stats.bytes_written},
        {"usage_bytes", t.stats.usage_bytes},
        {"capacity_bytes", t.stats.capacity_bytes},
        // The capacity scaling is exact when each block occupies what it assumed.
        {"assumed_bytes_per_block", t.stored_block_bytes},
        {"measured_bytes_per_block", t.stats.chunks
                                         ? nlohmann::json(t.stats.usage_bytes / t.stats.chunks)
                                         : nlohmann::json()}}},
  };
}

// What the model needs of every hit: per-token groups over the hit, window layers only their last W
// tokens, a hybrid model's state once (what a window-aware load reads at best; docs/models.md).
uint64_t MinimumHitBytes(const ReplayReport& r, const ReplayRun& run) {
  const auto& reqs = r.trace->requests;
  uint64_t total = 0;
  for (size_t i = 0; i < reqs.size() && i < run.hit_blocks_per_request.size(); ++i) {
    const uint64_t hit = HitTokens(reqs[i], run.hit_blocks_per_request[i], r.scale.block_tokens);
    if (hit > 0) total += MinimumPrefixBytes(r.model.layout, hit);
  }
  return total;
}

// Hit bytes per arrival second: the mean over the trace and the busiest second.
json BandwidthJson(const ReplayReport& r, const ReplayRun& run) {
  const auto& reqs = r.trace->requests;
  std::vector<uint64_t> per_second;
  for (size_t i = 0; i < reqs.size() && i < run.hit_blocks_per_request.size(); ++i) {
    const size_t s = (reqs[i].timestamp_ms - reqs.front().timestamp_ms) / 1000;
    if (per_second.size() <= s) per_second.resize(s + 1, 0);
    per_second[s] += run.hit_blocks_per_request[i];
  }
  const uint64_t peak =
      per_second.empty() ? 0 : *std::max_element(per_second.begin(), per_second.end());
  return json{
      {"arrival_rate_requests_per_s", r.summary.requests / DurationS(r)},
      {"hit_read_bytes_per_s_mean", ModelBytes(r, run.hit_blocks) / DurationS(r)},
      {"hit_minimum_bytes_per_s_mean", static_cast<double>(MinimumHitBytes(r, run)) / DurationS(r)},
      {"hit_read_bytes_per_s_peak_1s", static_cast<double>(ModelBytes(r, peak))},
      {"write_bytes_per_s_mean", ModelBytes(r, run.saved_blocks) / DurationS(r)},
  };
}

// Prefill FLOPs saved by a prefix hit of h tokens equal the FLOPs of a prefill of h tokens: the
// suffix still attends to the whole prefix, so what is skipped is exactly the prefix's own prefill.
json PrefillJson(const ReplayReport& r, const ReplayRun& run) {
  json gpus = json::array();
  const auto& reqs = r.trace->requests;
  for (const GpuProfile& g : r.gpus) {
    double saved = 0, total = 0;
    for (size_t i = 0; i < reqs.size() && i < run.hit_blocks_per_request.size(); ++i) {
      const uint64_t hit = HitTokens(reqs[i], run.hit_blocks_per_request[i], r.scale.block_tokens);
      saved += RecomputeSeconds(r.model, g, hit);
      total += RecomputeSeconds(r.model, g, reqs[i].input_length);
    }
    gpus.push_back(json{{"gpu", g.name},
                        {"description", g.description},
                        {"peak_flops", g.peak_flops},
                        {"mfu", g.mfu},
                        {"source", g.source},
                        {"profile_kind", std::string(g.Kind())},
                        {"profile", g.Label()},
                        {"prefill_gpu_seconds_total", total},
                        {"prefill_gpu_seconds_saved", saved},
                        {"fraction_saved", total > 0 ? saved / total : 0.0},
                        {"gpus_freed_at_arrival_rate", saved / DurationS(r)}});
  }
  return json{{"estimate", true},
              {"model",
               "forward-pass FLOPs (linear + causal attention) / (peak x MFU) for estimated "
               "profiles, the FLOP model fitted to timings for measured ones (gpus[].profile_kind); "
               "see src/eval/gpuprofile/gpu_profile.h"},
              {"gpus", gpus}};
}

// The offline optimum beside a run (belady.h): MIN on block references, prefix-hit accounting.
json BeladyJson(const BeladyResult& b) {
  return json{{"token_hit_ratio", b.TokenHitRatio()},
              {"hit_tokens", b.hit_tokens},
              {"capacity_blocks", b.capacity_blocks ? json(b.capacity_blocks) : json(nullptr)},
              {"resident_refs", b.resident_refs}};
}

// The policy's share of the optimum, or 1 when the optimum finds nothing either.
double OfOptimum(double ratio, const BeladyResult& b) {
  return b.TokenHitRatio() > 0 ? ratio / b.TokenHitRatio() : 1.0;
}

json RunJson(const ReplayReport& r, const ReplayRun& run) {
  json tiers = json::array();
  for (const TierReplayResult& t : run.tiers) tiers.push_back(TierJson(r, run, t));
  return json{{"admission", AdmissionName(run.admission)},
              {"token_hit_ratio", run.TokenHitRatio()},
              {"belady", BeladyJson(run.belady)},
              {"hit_tokens", run.hit_tokens},
              {"hit_blocks", run.hit_blocks},
              {"saved_blocks", run.saved_blocks},
              {"wrong_blocks", run.wrong_blocks},
              {"dropped_saves", run.store.dropped_saves},
              {"promotions", run.store.promotions},
              {"tiers", tiers},
              {"replay_seconds", run.seconds}};
}

std::string Line(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

double GiB(uint64_t b) { return static_cast<double>(b) / (1ull << 30); }

}  // namespace

std::string_view AdmissionName(Admission a) {
  return a == Admission::kSecondUse ? "second-use" : "always";
}

nlohmann::json ReportJson(const ReplayReport& r) {
  const TraceSummary& s = r.summary;
  json out;
  out["trace"] = json{{"path", r.trace_path},           {"requests", s.requests},
                      {"input_tokens", s.input_tokens}, {"output_tokens", s.output_tokens},
                      {"block_refs", s.block_refs},     {"unique_blocks", s.unique_blocks},
                      {"duration_s", DurationS(r)}};
  out["block_tokens"] = r.scale.block_tokens;
  out["model"] = json{{"preset", r.model.name},
                      {"model_id", r.model.model_id},
                      {"kv_bytes_per_token", r.scale.model_bytes_per_token},
                      {"kv_bytes_per_block", r.scale.ModelBlockBytes()}};
  out["replay_scale"] =
      json{{"bytes_per_token", r.scale.bytes_per_token}, {"block_bytes", r.scale.BlockBytes()}};
  out["unique_blocks"] = s.unique_blocks;
  out["footprint_bytes"] = ModelBytes(r, s.unique_blocks);
  out["unlimited_token_hit_ratio"] = s.UnlimitedHitRatio();
  if (!r.runs.empty()) {
    const ReplayRun& main = r.runs.front();
    out["token_hit_ratio"] = main.TokenHitRatio();
    out["belady_token_hit_ratio"] = main.belady.TokenHitRatio();
    out["admission"] = AdmissionName(main.admission);
    out["tiers"] = RunJson(r, main)["tiers"];
    out["bandwidth"] = BandwidthJson(r, main);
    out["prefill_saved_estimate"] = PrefillJson(r, main);
    out["wrong_blocks"] = main.wrong_blocks;
    out["replay_rate"] = json{{"seconds", main.seconds},
                              {"requests_per_s", main.requests / std::max(main.seconds, 1e-9)},
                              {"block_refs_per_s", main.block_refs / std::max(main.seconds, 1e-9)},
                              {"reference_same_run",
                               {{"load_trace_s", r.timings.load_trace_s},
                                {"derive_keys_s", r.timings.derive_keys_s},
                                {"hash_set_pass_s", r.timings.summarize_s}}}};
  }
  json policies = json::array();
  for (const ReplayRun& run : r.runs) policies.push_back(RunJson(r, run));
  out["policies"] = policies;
  if (!r.sweep.empty()) {
    json points = json::array();
    for (const ReplaySweepPoint& p : r.sweep) {
      json written = json::array();
      for (const TierReplayResult& t : p.run.tiers) written.push_back(ModelBytes(r, t.stats.puts));
      points.push_back(
          json{{"capacity_tokens", p.capacity_tokens},
               {"capacity_bytes", ModelBytes(r, p.capacity_tokens / r.scale.block_tokens)},
               {"token_hit_ratio", p.run.TokenHitRatio()},
               {"belady_token_hit_ratio", p.run.belady.TokenHitRatio()},
               {"hit_tokens", p.run.hit_tokens},
               {"bytes_written_per_tier", written},
               {"wrong_blocks", p.run.wrong_blocks}});
    }
    out["sweep"] = json{{"tier", r.sweep_tier}, {"points", points}};
  }
  return out;
}

std::string ReportText(const ReplayReport& r) {
  const TraceSummary& s = r.summary;
  std::string out;
  out += Line(
      "trace %s: %llu requests, %llu input tokens, %llu block refs, %llu distinct blocks, "
      "%.1f s\n",
      r.trace_path.c_str(), (unsigned long long)s.requests, (unsigned long long)s.input_tokens,
      (unsigned long long)s.block_refs, (unsigned long long)s.unique_blocks, DurationS(r));
  out += Line("model %s: %llu KV bytes/token%s; footprint of every distinct block %.2f GiB\n",
              std::string(r.model.name).c_str(), (unsigned long long)r.scale.model_bytes_per_token,
              r.scale.model_state_bytes_per_block > 0
                  ? Line(" + %llu bytes of state per block", (unsigned long long)r.scale.model_state_bytes_per_block).c_str()
                  : "",
              GiB(ModelBytes(r, s.unique_blocks)));
  out += Line("token hit ratio with unlimited capacity: %.4f\n", s.UnlimitedHitRatio());
  for (const ReplayRun& run : r.runs) {
    out += Line(
        "admission %s: token hit ratio %.4f, Belady %.4f (%.0f%% of it) (replay %.2f s, %.0f "
        "requests/s, %.0f block refs/s, wrong blocks %llu)\n",
        std::string(AdmissionName(run.admission)).c_str(), run.TokenHitRatio(),
        run.belady.TokenHitRatio(), 100.0 * OfOptimum(run.TokenHitRatio(), run.belady), run.seconds,
        run.requests / std::max(run.seconds, 1e-9), run.block_refs / std::max(run.seconds, 1e-9),
        (unsigned long long)run.wrong_blocks);
    if (run.store.dropped_saves > 0) {
      out += Line("  note: %llu background saves were dropped (a source evicted before its copy)\n",
                  (unsigned long long)run.store.dropped_saves);
    }
    for (const TierReplayResult& t : run.tiers) {
      out += Line("  %-40s hit ratio %.4f (Belady alone %.4f)  read %.2f GiB  written %.2f GiB  "
                  "evictions %llu\n",
                  t.url.c_str(), Ratio(t.hit_tokens, run.input_tokens), t.belady.TokenHitRatio(),
                  GiB(ModelBytes(r, t.hit_blocks)), GiB(ModelBytes(r, t.stats.puts)),
                  (unsigned long long)t.stats.evictions);
    }
  }
  out += Line(
      "reference, same run: trace parsed in %.3f s, keys derived in %.3f s, hash-set pass "
      "(no Store) in %.3f s\n",
      r.timings.load_trace_s, r.timings.derive_keys_s, r.timings.summarize_s);
  if (!r.runs.empty()) {
    const ReplayRun& main = r.runs.front();
    out += Line("hits need %.2f GB/s on average at the trace's arrival rate\n",
                ModelBytes(r, main.hit_blocks) / DurationS(r) / 1e9);
    if (!r.model.layout.classic()) {
      out += Line("  of which the model needs %.2f GB/s (window layers' last tokens, a state once per hit: "
                  "what a window-aware load reads at best)\n",
                  static_cast<double>(MinimumHitBytes(r, main)) / DurationS(r) / 1e9);
    }
    const json pre = PrefillJson(r, main);
    for (const auto& g : pre["gpus"]) {
      out += Line("prefill saved (%s, %s at MFU %.2f): %.0f GPU-s of %.0f (%.1f%%)\n",
                  g["profile_kind"] == "measured" ? "MEASURED-PROFILE FIT" : "ESTIMATE",
                  g["gpu"].get<std::string>().c_str(), g["mfu"].get<double>(),
                  g["prefill_gpu_seconds_saved"].get<double>(),
                  g["prefill_gpu_seconds_total"].get<double>(),
                  100.0 * g["fraction_saved"].get<double>());
    }
  }
  for (const ReplaySweepPoint& p : r.sweep) {
    out += Line("sweep %12llu tokens: token hit ratio %.4f, Belady %.4f (%.0f%% of it)\n",
                (unsigned long long)p.capacity_tokens, p.run.TokenHitRatio(),
                p.run.belady.TokenHitRatio(), 100.0 * OfOptimum(p.run.TokenHitRatio(), p.run.belady));
  }
  return out;
}

}  // namespace kvtier::internal
