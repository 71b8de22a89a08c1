// Summaries, the printed table and the JSON of `kvtier bench e2e`.
#include <algorithm>
#include <cstdio>
#include <string>

#include "eval/e2e/e2e_bench.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

// Nearest-rank percentile of an unsorted sample.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size()) + 0.999999);
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string Ms(double ms) {
  if (ms >= 10000) return Fmt("%.1f s", ms / 1000);
  return ms >= 10 ? Fmt("%.0f ms", ms) : Fmt("%.2f ms", ms);
}

std::string Pad(const std::string& s, size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; }

}  // namespace

RowSummary Summarize(const RoundResult& round) {
  RowSummary row;
  row.mode = round.mode;
  row.concurrency = round.concurrency;
  row.requests = static_cast<uint32_t>(round.requests.size());
  row.error = round.error;
  std::vector<double> ttft, load;
  double ttft_sum = 0, load_sum = 0, loading_s = 0;
  uint64_t prompt = 0, loaded = 0, out = 0;
  for (const RequestRecord& r : round.requests) {
    ttft.push_back(r.ttft_s * 1000);
    load.push_back(r.load_s * 1000);
    ttft_sum += r.ttft_s;
    load_sum += r.load_s;
    if (r.loaded_bytes > 0) loading_s += r.load_s;
    prompt += r.prompt_tokens;
    loaded += r.loaded_tokens;
    out += r.output_tokens;
    row.loaded_bytes += r.loaded_bytes;
  }
  row.ttft_p50_ms = Percentile(ttft, 50);
  row.ttft_p90_ms = Percentile(ttft, 90);
  row.ttft_p99_ms = Percentile(ttft, 99);
  row.load_p50_ms = Percentile(load, 50);
  row.output_tokens_per_s = round.wall_s > 0 ? static_cast<double>(out) / round.wall_s : 0;
  row.hit_ratio = prompt > 0 ? static_cast<double>(loaded) / static_cast<double>(prompt) : 0;
  row.load_share = ttft_sum > 0 ? load_sum / ttft_sum : 0;
  row.load_gbps = loading_s > 0 ? static_cast<double>(row.loaded_bytes) / loading_s / 1e9 : 0;
  return row;
}

std::string FormatTable(const E2eReport& report) {
  const std::vector<std::pair<std::string, size_t>> cols = {
      {"mode", 10},      {"conc", 5},       {"reqs", 5},         {"TTFT p50", 10},  {"p90", 10},
      {"p99", 10},       {"out tok/s", 10}, {"hit", 6},          {"loaded", 11},    {"load share", 11},
      {"load GB/s", 10}, {"speedup", 9},    {"same output", 12}};
  std::string out;
  for (const auto& [name, w] : cols) out += Pad(name, w) + " ";
  out += "\n";
  for (const RowSummary& r : report.rows) {
    std::vector<std::string> cells = {
        r.mode,
        std::to_string(r.concurrency),
        std::to_string(r.requests),
        Ms(r.ttft_p50_ms),
        Ms(r.ttft_p90_ms),
        Ms(r.ttft_p99_ms),
        Fmt("%.1f", r.output_tokens_per_s),
        Fmt("%.0f%%", r.hit_ratio * 100),
        FormatBytes(r.loaded_bytes),
        Fmt("%.1f%%", r.load_share * 100),
        r.loaded_bytes > 0 ? Fmt("%.2f", r.load_gbps) : "-",
        r.speedup_p50 > 0 ? Fmt("%.1fx", r.speedup_p50) : "-",
        r.mode == "recompute" ? "reference"
                              : std::to_string(r.outputs_matched) + "/" + std::to_string(r.outputs_checked)};
    for (size_t i = 0; i < cols.size(); ++i) out += Pad(cells[i], cols[i].second) + " ";
    if (!r.error.empty()) out += " ERROR: " + r.error;
    out += "\n";
  }
  return out;
}

std::string MatchLine(const E2eReport& report) {
  if (report.outputs_checked == 0) return "reloaded output vs recompute: not checked (no recompute run)";
  bool all = report.outputs_matched == report.outputs_checked;
  bool failed = std::any_of(report.rows.begin(), report.rows.end(), [](auto& r) { return !r.error.empty(); });
  return std::string("reloaded output matched recompute: ") + (all && !failed ? "yes" : "NO") + " (" +
         std::to_string(report.outputs_matched) + " of " + std::to_string(report.outputs_checked) +
         " greedy answers identical" + (failed ? "; some requests failed" : "") + ")";
}

nlohmann::json ToJson(const E2eReport& report) {
  const E2eOptions& o = report.options;
  nlohmann::json j;
  j["bench"] = "e2e";
  j["model"] = o.model;
  j["model_id"] = report.model_id;
  j["chunk_bytes"] = report.chunk_bytes;
  j["tokens_per_chunk"] = report.tokens_per_chunk;
  j["context_tokens"] = o.workload.context_tokens;
  j["turn_tokens"] = o.workload.turn_tokens;
  j["output_tokens"] = o.workload.output_tokens;
  j["prefill_step"] = o.prefill_step;
  j["populate_s"] = report.populate_s;
  j["outputs_checked"] = report.outputs_checked;
  j["outputs_matched"] = report.outputs_matched;
  for (const RowSummary& r : report.rows) {
    j["rows"].push_back({{"mode", r.mode},
                         {"concurrency", r.concurrency},
                         {"requests", r.requests},
                         {"ttft_p50_ms", r.ttft_p50_ms},
                         {"ttft_p90_ms", r.ttft_p90_ms},
                         {"ttft_p99_ms", r.ttft_p99_ms},
                         {"output_tokens_per_s", r.output_tokens_per_s},
                         {"hit_ratio", r.hit_ratio},
                         {"loaded_bytes", r.loaded_bytes},
                         {"load_share", r.load_share},
                         {"load_p50_ms", r.load_p50_ms},
                         {"load_gbps", r.load_gbps},
                         {"speedup_p50", r.speedup_p50},
                         {"outputs_checked", r.outputs_checked},
                         {"outputs_matched", r.outputs_matched},
                         {"error", r.error}});
  }
  return j;
}

}  // namespace kvtier::internal
