// PrometheusText: StoreStats as prometheus::MetricFamily values, written by prometheus-cpp's
// TextSerializer (which owns the format and the escaping of label values).
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kvtier/metrics.h"
#include "metrics/stats_json.h"

namespace kvtier {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddValue(MetricFamily& f, Labels labels, uint64_t value) {
  ClientMetric m;
  m.label = std::move(labels);
  (f.type == MetricType::Counter ? m.counter.value : m.gauge.value) = static_cast<double>(value);
  f.metric.push_back(std::move(m));
}

void AddHistogram(MetricFamily& f, Labels labels, const LatencyBuckets& b) {
  ClientMetric m;
  m.label = std::move(labels);
  m.histogram.sample_count = b.count();
  m.histogram.sample_sum = b.sum_seconds;
  for (size_t i = 0; i < b.cumulative.size(); ++i) {
    const double le = i < kLatencyBucketBounds.size() ? kLatencyBucketBounds[i]
                                                      : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({b.cumulative[i], le});
  }
  f.metric.push_back(std::move(m));
}

// One `tier` label per tier; a label that two tiers would share gets "#<index>" appended, so every
// series stays unique.
std::vector<std::string> TierLabels(std::span<const TierStats> tiers) {
  std::vector<std::string> labels;
  for (const TierStats& t : tiers) labels.push_back(MetricsTierLabel(t.url));
  std::vector<std::string> out = labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) out[i] += "#" + std::to_string(i);
  }
  return out;
}

struct TierField {
  const char* name;
  const char* help;
  MetricType type;
  uint64_t TierStats::*field;
};

constexpr TierField kTierFields[] = {
    {"kvtier_tier_hits_total", "Chunks read from the tier.", MetricType::Counter, &TierStats::hits},
    {"kvtier_tier_misses_total", "Chunk reads that found nothing in the tier.", MetricType::Counter,
     &TierStats::misses},
    {"kvtier_tier_read_bytes_total", "Payload bytes read from the tier.", MetricType::Counter,
     &TierStats::bytes_read},
    {"kvtier_tier_written_bytes_total", "Payload bytes written to the tier.", MetricType::Counter,
     &TierStats::bytes_written},
    {"kvtier_tier_puts_total", "Chunks stored into the tier.", MetricType::Counter, &TierStats::puts},
    {"kvtier_tier_put_errors_total", "Chunk stores into the tier that failed.", MetricType::Counter,
     &TierStats::put_errors},
    {"kvtier_tier_evictions_total", "Chunks evicted from the tier to make room.", MetricType::Counter,
     &TierStats::evictions},
    {"kvtier_tier_corrupt_chunks_total", "Chunks of the tier that failed verification.",
     MetricType::Counter, &TierStats::corrupt},
    {"kvtier_tier_dropped_saves_total", "Background writes to the tier not made (queue full or failed).",
     MetricType::Counter, &TierStats::dropped_saves},
    {"kvtier_tier_chunks", "Chunks stored in the tier now.", MetricType::Gauge, &TierStats::chunks},
    {"kvtier_tier_usage_bytes", "Bytes counted against the tier's capacity now.", MetricType::Gauge,
     &TierStats::usage_bytes},
    {"kvtier_tier_capacity_bytes", "Capacity of the tier in bytes (0: unbounded).", MetricType::Gauge,
     &TierStats::capacity_bytes},
};

void AddTierFamilies(std::span<const TierStats> tiers, std::vector<MetricFamily>& out) {
  if (tiers.empty()) return;
  const std::vector<std::string> labels = TierLabels(tiers);
  for (const TierField& field : kTierFields) {
    MetricFamily f = Family(field.name, field.help, field.type);
    for (size_t i = 0; i < tiers.size(); ++i) AddValue(f, {{"tier", labels[i]}}, tiers[i].*field.field);
    out.push_back(std::move(f));
  }
  MetricFamily f = Family("kvtier_tier_get_latency_seconds", "Time to read one chunk from the tier.",
                          MetricType::Histogram);
  for (size_t i = 0; i < tiers.size(); ++i) AddHistogram(f, {{"tier", labels[i]}}, tiers[i].get_latency_buckets);
  out.push_back(std::move(f));
}

struct NamespaceField {
  const char* name;
  const char* help;
  uint64_t NamespaceStats::*field;
};

constexpr NamespaceField kNamespaceFields[] = {
    {"kvtier_lookups_total", "Lookup calls.", &NamespaceStats::lookups},
    {"kvtier_lookup_chunks_total", "Chunks asked for by Lookup.", &NamespaceStats::lookup_chunks},
    {"kvtier_lookup_tokens_total", "Tokens asked for by Lookup.", &NamespaceStats::lookup_tokens},
    {"kvtier_lookup_hit_chunks_total", "Leading chunks Lookup found.", &NamespaceStats::hit_chunks},
    {"kvtier_lookup_hit_tokens_total", "Tokens of the leading chunks Lookup found.",
     &NamespaceStats::hit_tokens},
    {"kvtier_loads_total", "Load calls.", &NamespaceStats::loads},
    {"kvtier_load_chunks_total", "Chunks loaded.", &NamespaceStats::load_chunks},
    {"kvtier_load_bytes_total", "Payload bytes loaded.", &NamespaceStats::load_bytes},
    {"kvtier_saves_total", "Save calls.", &NamespaceStats::saves},
    {"kvtier_save_chunks_total", "Chunks given to Save.", &NamespaceStats::save_chunks},
};

void AddNamespaceFamilies(const std::vector<NamespaceStats>& spaces, std::vector<MetricFamily>& out) {
  if (spaces.empty()) return;
  for (const NamespaceField& field : kNamespaceFields) {
    MetricFamily f = Family(field.name, field.help, MetricType::Counter);
    for (const NamespaceStats& ns : spaces) AddValue(f, {{"namespace", ns.label}}, ns.*field.field);
    out.push_back(std::move(f));
  }
  MetricFamily load = Family("kvtier_load_latency_seconds", "Time of one Load call.", MetricType::Histogram);
  MetricFamily save = Family("kvtier_save_latency_seconds", "Time of one Save call.", MetricType::Histogram);
  for (const NamespaceStats& ns : spaces) {
    AddHistogram(load, {{"namespace", ns.label}}, ns.load_latency);
    AddHistogram(save, {{"namespace", ns.label}}, ns.save_latency);
  }
  out.push_back(std::move(load));
  out.push_back(std::move(save));
}

void AddStoreFamilies(const StoreStats& s, std::vector<MetricFamily>& out) {
  auto one = [&](const char* name, const char* help, MetricType type, uint64_t value) {
    MetricFamily f = Family(name, help, type);
    AddValue(f, {}, value);
    out.push_back(std::move(f));
  };
  one("kvtier_load_bytes_skipped_total",
      "Of the bytes loaded, those not read: window groups outside the prefix's window (docs/models.md).",
      MetricType::Counter, s.load_bytes_skipped);
  one("kvtier_promotions_total", "Chunks copied into a faster tier after a load or prefetch.",
      MetricType::Counter, s.promotions);
  one("kvtier_background_saves_total", "Chunks written to every slower tier in the background.",
      MetricType::Counter, s.queued_saves);
  one("kvtier_dropped_saves_total", "Chunks not written to the slower tiers (queue full or write failed).",
      MetricType::Counter, s.dropped_saves);
  one("kvtier_save_queue_bytes", "Bytes of queued and running background jobs.", MetricType::Gauge,
      s.queue_bytes_now);
  one("kvtier_save_queue_chunks", "Queued and running background jobs (one chunk each).",
      MetricType::Gauge, s.queue_chunks_now);
  if (!s.observed) return;  // no StoreOptions::observer: no chunk events
  one("kvtier_events_total", "Chunk events (stored, removed, evicted) given to the Store's observer.",
      MetricType::Counter, s.events);
  one("kvtier_events_published_total", "Chunk events the observer sent on (the publisher: to ZeroMQ).",
      MetricType::Counter, s.events_published);
  one("kvtier_events_dropped_total", "Chunk events lost because the publisher's queue was full.",
      MetricType::Counter, s.events_dropped);
  one("kvtier_event_subscribers", "Subscriptions the event publisher knows of now.", MetricType::Gauge,
      s.event_subscribers);
}

std::string Serialize(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace

std::string PrometheusText(const StoreStats& stats) {
  std::vector<MetricFamily> families;
  AddNamespaceFamilies(stats.namespaces, families);
  AddStoreFamilies(stats, families);
  AddTierFamilies(stats.tiers, families);
  return Serialize(families);
}

std::string PrometheusText(std::span<const TierStats> tiers) {
  std::vector<MetricFamily> families;
  AddTierFamilies(tiers, families);
  return Serialize(families);
}

namespace internal {

std::string PrometheusNamespaceUsageText(std::string_view url, std::span<const NamespaceUsage> usage) {
  if (usage.empty()) return "";
  MetricFamily chunks = Family("kvtier_tier_namespace_chunks", "Chunks of one namespace stored in the tier now.",
                               MetricType::Gauge);
  MetricFamily bytes = Family("kvtier_tier_namespace_usage_bytes",
                              "Bytes one namespace counts against the tier's capacity now.", MetricType::Gauge);
  const std::string tier = MetricsTierLabel(url);
  for (const NamespaceUsage& u : usage) {
    const Labels labels = {{"tier", tier}, {"namespace", DigestHex(u.ns).substr(0, 16)}};
    AddValue(chunks, labels, u.chunks);
    AddValue(bytes, labels, u.bytes);
  }
  return Serialize({std::move(chunks), std::move(bytes)});
}

}  // namespace internal
}  // namespace kvtier
