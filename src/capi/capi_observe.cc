// Observability of the C API: the store's statistics as JSON and as Prometheus text.
#include <algorithm>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "capi/capi_internal.h"
#include "kvtier/metrics.h"

using kvtier::Status;
using namespace kvtier::capi;

namespace {

nlohmann::ordered_json LatencyJson(const kvtier::LatencySummary& l) {
  return {{"count", l.count}, {"p50", l.p50_us}, {"p90", l.p90_us}, {"p99", l.p99_us}, {"max", l.max_us}};
}

nlohmann::ordered_json TierJson(const kvtier::TierStats& s) {
  return {{"url", s.url},
          {"hits", s.hits},
          {"misses", s.misses},
          {"bytes_read", s.bytes_read},
          {"bytes_written", s.bytes_written},
          {"puts", s.puts},
          {"put_errors", s.put_errors},
          {"evictions", s.evictions},
          {"corrupt", s.corrupt},
          {"dropped_saves", s.dropped_saves},
          {"chunks", s.chunks},
          {"usage_bytes", s.usage_bytes},
          {"capacity_bytes", s.capacity_bytes},
          {"get_latency_us", LatencyJson(s.get_latency)}};
}

nlohmann::ordered_json NamespaceJson(const kvtier::NamespaceStats& n) {
  return {{"label", n.label},           {"lookups", n.lookups},     {"lookup_chunks", n.lookup_chunks},
          {"lookup_tokens", n.lookup_tokens}, {"hit_chunks", n.hit_chunks}, {"hit_tokens", n.hit_tokens},
          {"loads", n.loads},           {"load_chunks", n.load_chunks}, {"load_bytes", n.load_bytes},
          {"saves", n.saves},           {"save_chunks", n.save_chunks}};
}

std::string StatsJson(const kvtier::StoreStats& s) {
  nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
  for (const auto& t : s.tiers) tiers.push_back(TierJson(t));
  nlohmann::ordered_json namespaces = nlohmann::ordered_json::array();
  for (const auto& n : s.namespaces) namespaces.push_back(NamespaceJson(n));
  const nlohmann::ordered_json j = {{"tiers", std::move(tiers)},
                                    {"lookups", s.lookups},
                                    {"lookup_chunks_hit", s.lookup_chunks_hit},
                                    {"lookup_chunks_missed", s.lookup_chunks_missed},
                                    {"loads", s.loads},
                                    {"load_chunks", s.load_chunks},
                                    {"load_bytes", s.load_bytes},
                                    {"saves", s.saves},
                                    {"save_chunks", s.save_chunks},
                                    {"promotions", s.promotions},
                                    {"queued_saves", s.queued_saves},
                                    {"dropped_saves", s.dropped_saves},
                                    {"queue_bytes_now", s.queue_bytes_now},
                                    {"queue_chunks_now", s.queue_chunks_now},
                                    {"load_latency_us", LatencyJson(s.load_latency)},
                                    {"save_latency_us", LatencyJson(s.save_latency)},
                                    {"namespaces", std::move(namespaces)}};
  // Tier URLs are the caller's text: replace invalid UTF-8 rather than throw.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Copies `text` into buf as kvtier.h describes and returns its length.
size_t CopyText(const std::string& text, char* buf, size_t cap) {
  if (cap > 0) {
    const size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

// Runs `render` on the store's statistics and copies its text; 0 (and the last error) on failure.
template <typename Render>
size_t StatsText(const char* fn, kvtier_store* store, char* buf, size_t cap, Render render) {
  size_t length = 0;
  (void)Guard(fn, [&]() -> Status {
    if (store == nullptr) return NullArgument(fn, "store");
    if (buf == nullptr && cap > 0) return NullArgument(fn, "buf");
    length = CopyText(render(store->store->Stats()), buf, cap);
    return Status::OK();
  });
  return length;
}

}  // namespace

extern "C" {

size_t kvtier_store_stats_json(kvtier_store* store, char* buf, size_t cap) {
  return StatsText("kvtier_store_stats_json", store, buf, cap, StatsJson);
}

size_t kvtier_store_metrics_text(kvtier_store* store, char* buf, size_t cap) {
  return StatsText("kvtier_store_metrics_text", store, buf, cap,
                   [](const kvtier::StoreStats& s) { return kvtier::PrometheusText(s); });
}
}  // extern "C"
