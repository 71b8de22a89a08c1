// Metrics: a Store's statistics in the Prometheus text exposition format (version 0.0.4), for a scrape
// endpoint, the C API (kvtier_store_metrics_text), Python (Store.metrics_text()) and
// `kvtier stats --prometheus`. Every metric is named kvtier_*; docs/metrics.md lists them with their
// types and labels. Labels: `tier` (the tier URL without secret-looking parameters, see
// MetricsTierLabel) and `namespace` (the first 16 hex characters of the namespace id, or "other").
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "kvtier/store.h"
#include "kvtier/tier.h"

namespace kvtier {

// Every metric of a Store: per namespace, per tier and store-wide. Take `stats` from Store::Stats().
std::string PrometheusText(const StoreStats& stats);

// Only the per-tier metrics (kvtier_tier_*), e.g. for a tier opened on its own.
std::string PrometheusText(std::span<const TierStats> tiers);

// The `tier` label of a tier URL: the URL without user information (user:password@) and without any
// query parameter whose name looks secret (key_file=, or a name containing key, secret, pass, token,
// cred, auth or sig, in any case). Other parameters (capacity=, ...) are kept in their order.
std::string MetricsTierLabel(std::string_view url);

}  // namespace kvtier
