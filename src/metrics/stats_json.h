// StoreStats and TierStats as JSON objects: one encoding for `kvtier stats --json` and the C API's
// kvtier_store_stats_json (and so Python's Store.stats()).
#pragma once

#include <nlohmann/json.hpp>

#include "kvtier/store.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

nlohmann::ordered_json LatencyJson(const LatencySummary& l);  // microseconds: count, p50, p90, p99, max
nlohmann::ordered_json TierStatsJson(const TierStats& s);
nlohmann::ordered_json NamespaceStatsJson(const NamespaceStats& n);
nlohmann::ordered_json StoreStatsJson(const StoreStats& s);

}  // namespace kvtier::internal
