// `kvtier bench save`: the results as JSON (schema kvtier.bench.save/1) and as the summary a user reads.
//
// The JSON layout is a contract with `kvtier report` (report_inputs.cc checks the fields it reads):
// add fields freely, never rename or remove one without bumping the schema. Rates in decimal GB/s.
#include <cstdio>
#include <sstream>

#include "eval/benchlib/save_bench.h"

namespace kvtier::internal {
namespace {

double G(double bytes_per_second) { return bytes_per_second / 1e9; }

nlohmann::json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count}, {"p50_ms", s.p50_us / 1e3}, {"p90_ms", s.p90_us / 1e3},
          {"p99_ms", s.p99_us / 1e3}, {"max_ms", s.max_us / 1e3}};
}

nlohmann::json StepJson(const SaveStep& s) {
  nlohmann::json queue = nlohmann::json::array();
  for (const QueueSample& q : s.queue) queue.push_back({q.t, q.bytes, q.chunks});
  return {{"target_gbps", G(s.target_rate)},     {"offered_gbps", G(s.offered_rate)},
          {"absorbed_gbps", G(s.absorbed_rate)}, {"saves", s.saves},
          {"chunks", s.chunks},                  {"bytes_offered", s.bytes_offered},
          {"bytes_absorbed", s.bytes_absorbed},  {"dropped_saves", s.dropped},
          {"save_errors", s.errors},             {"feed_seconds", s.feed_seconds},
          {"flush_seconds", s.flush_seconds},    {"save_latency", LatencyJson(s.save_latency)},
          {"queue_max_bytes", s.queue_max_bytes}, {"queue_samples", queue},
          {"passed", s.passed}};
}

nlohmann::json FeedJson(const SaveBenchResult& r) {
  const SaveBenchConfig& c = r.config;
  nlohmann::json feed = {{"context_tokens", c.context_tokens},
                         {"chunks_per_save", r.plan.chunks_per_save},
                         {"save_bytes", r.plan.prefix_bytes},
                         {"gpu", c.gpu ? nlohmann::json(c.gpu->Label()) : nlohmann::json(nullptr)},
                         {"gpus", c.gpus},
                         {"prefill_seconds", r.plan.prefill_seconds},
                         {"model_rate_gbps", G(r.plan.model_rate)},
                         {"explicit_rate_gbps", c.rate ? nlohmann::json(G(*c.rate)) : nlohmann::json(nullptr)},
                         {"start_rate_gbps", G(r.plan.start_rate)},
                         {"feeders", c.feeders},
                         {"step_seconds", c.step_seconds},
                         {"max_seconds", c.max_seconds},
                         {"sample_seconds", c.sample_seconds},
                         {"bisections", c.bisections}};
  return feed;
}

nlohmann::json FioJson(const SaveBenchResult& r) {
  if (!r.fio_write) return nullptr;
  const FioResult& f = *r.fio_write;
  return {{"gbps", G(f.bytes_per_second)}, {"bytes", f.bytes},     {"seconds", f.seconds},
          {"iodepth", f.iodepth},          {"ioengine", f.ioengine}, {"memory", f.memory},
          {"command", f.command}};
}

}  // namespace

nlohmann::json ToJson(const SaveBenchResult& r) {
  const SaveBenchConfig& c = r.config;
  nlohmann::json steps = nlohmann::json::array();
  for (const SaveStep& s : r.steps) steps.push_back(StepJson(s));
  const bool best = r.best.has_value();
  nlohmann::json j = {
      {"schema", kSaveSchema},
      {"bench", "save"},
      {"started_at", r.started_at},
      {"host", r.host},
      {"target", {{"url", c.target}, {"scheme", c.target_scheme}, {"directory", c.target_dir}}},
      {"tiers", r.tiers},
      {"model", {{"preset", std::string(c.model.name)}, {"id", std::string(c.model.model_id)},
                 {"layout", c.model.layout.ToString()}, {"chunk_tokens", c.model.layout.tokens_per_chunk},
                 {"chunk_bytes", r.plan.chunk_bytes}, {"bytes_per_token", c.model.layout.BytesPerToken()}}},
      {"store", {{"mem_capacity_bytes", r.plan.mem_bytes}, {"save_queue_bytes", c.queue_bytes},
                 {"save_queue_chunks", c.queue_chunks}, {"background_threads", c.background_threads}}},
      {"feed", FeedJson(r)},
      {"steps", steps},
      {"fio_write", FioJson(r)},
      {"fio_note", r.fio_note},
      {"summary",
       {{"highest_drop_free_gbps", best ? nlohmann::json(G(r.HighestDropFreeRate())) : nlohmann::json(nullptr)},
        {"best_step", best ? nlohmann::json(*r.best) : nlohmann::json(nullptr)},
        {"fio_write_gbps", r.fio_write ? nlohmann::json(G(r.fio_write->bytes_per_second)) : nlohmann::json(nullptr)},
        {"ratio_to_fio_write", best && r.fio_write ? nlohmann::json(r.RatioToFio()) : nlohmann::json(nullptr)},
        {"best_step_absorbed_gbps", best ? nlohmann::json(G(r.BestAbsorbedRate())) : nlohmann::json(nullptr)},
        {"ratio_absorbed_to_fio_write", best && r.fio_write ? nlohmann::json(r.AbsorbedRatioToFio()) : nlohmann::json(nullptr)},
        {"stop_reason", r.stop_reason}}},
  };
  return j;
}

std::string FormatSummary(const SaveBenchResult& r) {
  const SaveBenchConfig& c = r.config;
  std::ostringstream out;
  char line[400];
  out << "kvtier bench save: " << c.model.name << " (" << FormatBytes(r.plan.chunk_bytes) << " chunks, "
      << r.plan.chunks_per_save << " per Save = " << c.context_tokens << " tokens)\n";
  out << "  store: ";
  for (size_t i = 0; i < r.tiers.size(); ++i) out << (i ? " over " : "") << r.tiers[i];
  out << "; queue " << FormatBytes(c.queue_bytes) << ", " << c.background_threads << " background threads\n";
  if (r.plan.model_rate > 0) {
    std::snprintf(line, sizeof(line), "  feed: %u GPU(s) x %.2f GB/s = %.2f GB/s (a %llu-token prefill in %.2f s)\n",
                  c.gpus, G(r.plan.model_rate) / c.gpus, G(r.plan.model_rate),
                  static_cast<unsigned long long>(c.context_tokens), r.plan.prefill_seconds);
    out << line;
    if (c.gpu) out << "  GPU profile: " << c.gpu->Label() << "\n";
  }
  if (c.rate) out << "  start rate: " << G(*c.rate) << " GB/s (--rate)\n";
  out << "\n  target GB/s | offered GB/s | absorbed GB/s | dropped | queue max | save p50 / p99 / max ms\n";
  for (const SaveStep& s : r.steps) {
    std::snprintf(line, sizeof(line), "  %11.2f | %12.2f | %13.2f | %7llu | %9s | %.1f / %.1f / %.1f%s\n",
                  G(s.target_rate), G(s.offered_rate), G(s.absorbed_rate),
                  static_cast<unsigned long long>(s.dropped), FormatBytes(s.queue_max_bytes).c_str(),
                  s.save_latency.p50_us / 1e3, s.save_latency.p99_us / 1e3, s.save_latency.max_us / 1e3,
                  s.errors ? " (save errors)" : "");
    out << line;
  }
  out << "\n  search: " << r.stop_reason << "\n";
  if (r.best) {
    std::snprintf(line, sizeof(line), "  highest drop-free rate: %.2f GB/s (steps of %.1f s; a queue of %s can "
                  "hide up to %.2f GB/s above the disk's sustained rate for that long)\n",
                  G(r.HighestDropFreeRate()), c.step_seconds, FormatBytes(c.queue_bytes).c_str(),
                  G(static_cast<double>(c.queue_bytes) / c.step_seconds));
    out << line;
  } else {
    out << "  highest drop-free rate: none (every step dropped saves or fell behind)\n";
  }
  if (r.fio_write) {
    std::snprintf(line, sizeof(line), "  fio O_DIRECT sequential write, iodepth %u, same disk, same run: %.2f GB/s (%s)\n",
                  r.fio_write->iodepth, G(r.fio_write->bytes_per_second), r.fio_write->memory.c_str());
    out << line;
    if (r.best) {
      std::snprintf(line, sizeof(line), "  highest drop-free rate / fio write: %.0f%% (that step's absorbed rate, "
                    "%.2f GB/s with its drain: %.0f%%)\n", 100 * r.RatioToFio(), G(r.BestAbsorbedRate()),
                    100 * r.AbsorbedRatioToFio());
      out << line;
    }
  } else {
    out << "  fio write reference: " << r.fio_note << "\n";
  }
  return out.str();
}

}  // namespace kvtier::internal
