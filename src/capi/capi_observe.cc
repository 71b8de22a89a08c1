// Observability of the C API: the store's statistics as JSON and as Prometheus text.
#include <algorithm>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "capi/capi_internal.h"
#include "metrics/stats_json.h"
#include "kvtier/metrics.h"

using kvtier::Status;
using namespace kvtier::capi;

namespace {

std::string StatsJson(const kvtier::StoreStats& s) {
  // Tier URLs are the caller's text: replace invalid UTF-8 rather than throw.
  return kvtier::internal::StoreStatsJson(s).dump(-1, ' ', false,
                                                  nlohmann::ordered_json::error_handler_t::replace);
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
