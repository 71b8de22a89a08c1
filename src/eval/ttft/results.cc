#include "eval/ttft/results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "eval/gpuprofile/gpu_profile.h"
#include "eval/ttft/session.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

TtftRow RowOf(const TtftOptions& o, const PointResult& p) {
  TtftRow r;
  r.mode = p.mode;
  r.concurrency = p.concurrency;
  r.sessions = p.sessions;
  r.turns = static_cast<uint32_t>(p.turns.size());
  std::vector<double> ttft, queue, compute;
  double load_s = 0, cached = 0;
  for (const TurnRecord& t : p.turns) {
    ttft.push_back(t.Ttft() * 1e3);
    queue.push_back(t.QueueSeconds() * 1e3);
    compute.push_back(t.compute_s * 1e3);
    r.load_bytes += t.load_bytes;
    r.min_bytes += t.min_bytes;
    r.missing_chunks += t.missing_chunks;
    if (t.load_bytes > 0) load_s += t.load_s;
    cached += static_cast<double>(t.cached_tokens);
  }
  r.p50_ms = Percentile(ttft, 0.50);
  r.p90_ms = Percentile(ttft, 0.90);
  r.p99_ms = Percentile(ttft, 0.99);
  r.queue_p50_ms = Percentile(queue, 0.50);
  r.compute_p50_ms = Percentile(compute, 0.50);
  r.load_gbps = load_s > 0 ? static_cast<double>(r.load_bytes) / load_s / 1e9 : 0;
  r.aggregate_load_gbps = p.wall_s > 0 ? static_cast<double>(r.load_bytes) / p.wall_s / 1e9 : 0;
  r.gpu_busy = p.wall_s > 0 ? std::min(1.0, p.gpu_busy_s / p.wall_s) : 0;
  r.mean_cached_tokens = p.turns.empty() ? 0 : cached / static_cast<double>(p.turns.size());
  r.read_bytes = r.load_bytes - std::min(r.load_bytes, p.load_bytes_skipped);
  (void)o;
  return r;
}

double Percent(uint64_t part, uint64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0;
}

// Per row that loaded: the KV bytes read against the whole chunks (naive) and the model's minimum.
std::string FormatReadBytes(const std::vector<TtftRow>& rows) {
  std::string out;
  char line[256];
  for (const TtftRow& r : rows) {
    if (r.load_bytes == 0) continue;
    std::snprintf(line, sizeof(line), "  %s c=%u: KV read %s = %.1f%% of the whole chunks (%s), %.1f%% of the minimum the model needs (%s)\n",
                  r.mode.c_str(), r.concurrency, FormatBytes(r.read_bytes).c_str(), Percent(r.read_bytes, r.load_bytes),
                  FormatBytes(r.load_bytes).c_str(), Percent(r.read_bytes, r.min_bytes), FormatBytes(r.min_bytes).c_str());
    out += line;
  }
  return out;
}

json Nullable(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::vector<TtftRow> SummarizeTtft(const TtftOptions& o, const std::vector<PointResult>& points) {
  std::vector<TtftRow> rows;
  for (const PointResult& p : points) rows.push_back(RowOf(o, p));
  for (TtftRow& r : rows) {
    for (const TtftRow& base : rows) {
      if (base.mode == "recompute" && base.concurrency == r.concurrency && r.p50_ms > 0) {
        r.speedup_p50 = base.p50_ms / r.p50_ms;
      }
    }
  }
  return rows;
}

std::vector<BreakEven> BreakEvens(const TtftOptions& o) {
  std::vector<BreakEven> out;
  for (uint32_t t = 0; t < o.turns; ++t) {
    const TurnShape s = ShapeOf(o, t);
    BreakEven b;
    b.context_tokens = s.saved_chunks * o.model.layout.tokens_per_chunk;
    b.prompt_tokens = s.prompt_tokens;
    b.recompute_s = PrefillSeconds(o.model, o.gpu, 0, s.prompt_tokens);
    b.with_cache_s = PrefillSeconds(o.model, o.gpu, b.context_tokens, s.prompt_tokens - b.context_tokens);
    const double saved = b.recompute_s - b.with_cache_s;
    b.break_even_gbps = saved > 0 ? static_cast<double>(s.saved_chunks * o.model.layout.BytesPerChunk()) / saved / 1e9 : 0;
    out.push_back(b);
  }
  return out;
}

std::string ComputeModelNote(const TtftOptions& o) {
  return "compute modelled from GPU profile " + o.gpu.Label();
}

json TtftJson(const TtftOptions& o, const std::vector<TtftRow>& rows, const std::string& started_at,
              const std::string& host) {
  const std::string note = ComputeModelNote(o);
  const std::string short_note = "modelled from GPU profile " + o.gpu.name + " (" + std::string(o.gpu.Kind()) + ")";
  json jr = json::array();
  for (const TtftRow& r : rows) {
    jr.push_back({{"mode", r.mode},
                  {"concurrency", r.concurrency},
                  {"sessions", r.sessions},
                  {"turns", r.turns},
                  {"ttft_p50_ms", r.p50_ms},
                  {"ttft_p90_ms", r.p90_ms},
                  {"ttft_p99_ms", r.p99_ms},
                  {"speedup_p50", Nullable(r.speedup_p50)},
                  {"load_gbps", r.load_bytes > 0 ? json(r.load_gbps) : json(nullptr)},
                  {"aggregate_load_gbps", r.load_bytes > 0 ? json(r.aggregate_load_gbps) : json(nullptr)},
                  {"load_bytes", r.load_bytes},
                  {"read_bytes", r.read_bytes},
                  {"minimum_bytes", r.min_bytes},
                  {"missing_chunks", r.missing_chunks},
                  {"mean_cached_tokens", r.mean_cached_tokens},
                  {"queue_p50_ms", r.queue_p50_ms},
                  {"compute_p50_ms", r.compute_p50_ms},
                  {"gpu_busy", r.gpu_busy},
                  {"compute", short_note}});
  }
  json be = json::array();
  for (const BreakEven& b : BreakEvens(o)) {
    be.push_back({{"context_tokens", b.context_tokens},
                  {"prompt_tokens", b.prompt_tokens},
                  {"recompute_seconds", b.recompute_s},
                  {"with_cache_seconds", b.with_cache_s},
                  {"break_even_gbps", b.break_even_gbps},
                  {"compute", short_note}});
  }
  std::vector<std::string> modes(o.modes.begin(), o.modes.end());
  return json{{"schema", kTtftSchema},
              {"bench", "ttft"},
              {"started_at", started_at},
              {"host", host},
              {"compute", note},
              {"gpu",
               {{"profile", o.gpu.name},
                {"kind", std::string(o.gpu.Kind())},
                {"label", o.gpu.Label()},
                {"measured_on", o.gpu.measured ? json(o.gpu.measured_on) : json(nullptr)},
                {"source", o.gpu.source}}},
              {"model",
               {{"preset", std::string(o.model.name)},
                {"model_id", std::string(o.model.model_id)},
                {"layout", o.model.layout.ToString()},
                {"bytes_per_token", o.model.layout.BytesPerToken()},
                {"chunk_bytes", o.model.layout.BytesPerChunk()}}},
              {"workload",
               {{"context_tokens", o.context_tokens},
                {"turn_tokens", o.turn_tokens},
                {"turns_per_session", o.turns},
                {"min_sessions", o.min_sessions},
                {"load_batch_chunks", o.load_batch_chunks},
                {"concurrency", o.concurrency},
                {"modes", modes}}},
              {"break_even", be},
              {"rows", jr}};
}

std::string FormatTtftTable(const TtftOptions& o, const std::vector<TtftRow>& rows) {
  std::string out = "TTFT of returning sessions, " + ComputeModelNote(o) +
                    "; loads are real Store I/O on this host\n";
  out += std::string(o.model.name) + ", " + std::to_string(o.context_tokens) + "-token context + " +
         std::to_string(o.turn_tokens) + " tokens per turn, " + std::to_string(o.turns) + " turns per session\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-10s %4s %5s %10s %10s %10s %9s %9s %9s %9s\n", "mode", "conc", "turns",
                "p50 ms", "p90 ms", "p99 ms", "speedup", "load GB/s", "queue ms", "GPU busy");
  out += line;
  for (const TtftRow& r : rows) {
    std::snprintf(line, sizeof(line), "%-10s %4u %5u %10.1f %10.1f %10.1f %9s %9s %9.1f %8.0f%%\n", r.mode.c_str(),
                  r.concurrency, r.turns, r.p50_ms, r.p90_ms, r.p99_ms,
                  r.speedup_p50 ? Fmt("%.2fx", *r.speedup_p50).c_str() : "-",
                  r.load_bytes > 0 ? Fmt("%.2f", r.load_gbps).c_str() : "-", r.queue_p50_ms, 100 * r.gpu_busy);
    out += line;
  }
  if (!o.model.layout.classic()) out += FormatReadBytes(rows);
  out += "break-even load bandwidth (" + std::string("compute modelled from ") + o.gpu.name + ", " +
         std::string(o.gpu.Kind()) + "):";
  for (const BreakEven& b : BreakEvens(o)) {
    out += " " + std::to_string(b.context_tokens) + " tokens " + Fmt("%.2f GB/s", b.break_even_gbps) + ";";
  }
  out += "\n";
  return out;
}

}  // namespace kvtier::internal
