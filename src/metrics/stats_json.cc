#include "metrics/stats_json.h"

namespace kvtier::internal {

nlohmann::ordered_json LatencyJson(const LatencySummary& l) {
  return {{"count", l.count}, {"p50", l.p50_us}, {"p90", l.p90_us}, {"p99", l.p99_us}, {"max", l.max_us}};
}

nlohmann::ordered_json TierStatsJson(const TierStats& s) {
  nlohmann::ordered_json j = {{"url", s.url},
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
                              {"metadata_ops", s.metadata_ops},
                              {"get_latency_us", LatencyJson(s.get_latency)}};
  if (!s.read_mode.empty()) j["read_mode"] = s.read_mode;
  return j;
}

nlohmann::ordered_json NamespaceStatsJson(const NamespaceStats& n) {
  return {{"label", n.label},
          {"lookups", n.lookups},
          {"lookup_chunks", n.lookup_chunks},
          {"lookup_tokens", n.lookup_tokens},
          {"hit_chunks", n.hit_chunks},
          {"hit_tokens", n.hit_tokens},
          {"loads", n.loads},
          {"load_chunks", n.load_chunks},
          {"load_bytes", n.load_bytes},
          {"saves", n.saves},
          {"save_chunks", n.save_chunks}};
}

nlohmann::ordered_json StoreStatsJson(const StoreStats& s) {
  nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
  for (const auto& t : s.tiers) tiers.push_back(TierStatsJson(t));
  nlohmann::ordered_json namespaces = nlohmann::ordered_json::array();
  for (const auto& n : s.namespaces) namespaces.push_back(NamespaceStatsJson(n));
  return {{"tiers", std::move(tiers)},
          {"lookups", s.lookups},
          {"lookup_chunks_hit", s.lookup_chunks_hit},
          {"lookup_chunks_missed", s.lookup_chunks_missed},
          {"loads", s.loads},
          {"load_chunks", s.load_chunks},
          {"load_bytes", s.load_bytes},
          {"load_bytes_skipped", s.load_bytes_skipped},
          {"saves", s.saves},
          {"save_chunks", s.save_chunks},
          {"promotions", s.promotions},
          {"promotions_dropped", s.promotions_dropped},
          {"borrows", s.borrows},
          {"queued_saves", s.queued_saves},
          {"dropped_saves", s.dropped_saves},
          {"queue_bytes_now", s.queue_bytes_now},
          {"queue_chunks_now", s.queue_chunks_now},
          {"load_latency_us", LatencyJson(s.load_latency)},
          {"save_latency_us", LatencyJson(s.save_latency)},
          {"events", {{"observed", s.observed},
                      {"told", s.events},
                      {"published", s.events_published},
                      {"dropped", s.events_dropped},
                      {"subscribers", s.event_subscribers}}},
          {"namespaces", std::move(namespaces)}};
}

nlohmann::ordered_json NamespaceUsageJson(std::span<const NamespaceUsage> usage) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const NamespaceUsage& u : usage) {
    out.push_back({{"namespace", DigestHex(u.ns)}, {"chunks", u.chunks}, {"bytes", u.bytes}});
  }
  return out;
}

}  // namespace kvtier::internal
