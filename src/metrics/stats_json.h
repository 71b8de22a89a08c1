// StoreStats and TierStats as JSON objects: one encoding for `kvtier stats --json` and the C API's
// kvtier_store_stats_json (and so Python's Store.stats()).
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <string_view>

#include "core/namespace_usage.h"
#include "kvtier/store.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

nlohmann::ordered_json LatencyJson(const LatencySummary& l);  // microseconds: count, p50, p90, p99, max
nlohmann::ordered_json TierStatsJson(const TierStats& s);
nlohmann::ordered_json NamespaceStatsJson(const NamespaceStats& n);
nlohmann::ordered_json StoreStatsJson(const StoreStats& s);
// [{"namespace": 64 hex, "chunks", "bytes"}, ...]: a tier's usage per namespace (`kvtier stats`).
nlohmann::ordered_json NamespaceUsageJson(std::span<const NamespaceUsage> usage);
// kvtier_tier_namespace_chunks and kvtier_tier_namespace_usage_bytes (gauges; labels `tier` as in
// PrometheusText and `namespace`, the first 16 hex characters of the namespace id) for tier `url`.
std::string PrometheusNamespaceUsageText(std::string_view url, std::span<const NamespaceUsage> usage);

}  // namespace kvtier::internal
