// `kvtier stats --target URL [--json | --prometheus]`: a tier's Stats() as this process sees it after
// opening it (for a persistent tier: what is stored, against which capacity, and what opening it found;
// for an object tier also its client and request counts), as a table, JSON, or the Prometheus text format
// (the kvtier_tier_* metrics of docs/metrics.md); shm:// adds chunks and bytes per namespace. The
// tier is opened read-only: stats changes nothing on disk. `--probe-reads` (fs:// only) opens an
// existing pool writable instead, so the tier times its O_DIRECT-or-buffered read probe on this mount
// (it writes one probe file in the pool and removes it; no gc pass: capacity= is refused there).
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tiers/file/file_tier.h"
#include "kvtier/metrics.h"
#include "metrics/stats_json.h"
#include "kvtier/tier.h"
#include "tiers/object/object_tier.h"
#include "tiers/shm/shm_tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct StatsArgs {
  std::string target;
  bool json = false;
  bool prometheus = false;
  bool probe_reads = false;
};

Result<std::unique_ptr<Tier>> OpenForStats(const StatsArgs& a) {
  auto tier = OpenTier(a.target, TierOpenOptions{.read_only = true});  // looking changes nothing
  if (!a.probe_reads || !tier.ok()) return tier;
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(a.target));
  if (url.scheme != "fs" || url.params.count("capacity") != 0) {
    return Status::InvalidArgument("--probe-reads takes an fs:// pool without capacity= (no gc pass may run)");
  }
  tier->reset();  // the pool exists: open it again, writable, so the read probe runs
  return OpenTier(a.target, TierOpenOptions{.read_only = false});
}

int RunStats(const StatsArgs& a) {
  auto tier = OpenForStats(a);
  if (!tier.ok()) {
    std::cerr << "kvtier stats: cannot open --target " << a.target << ": " << tier.status().ToString()
              << "\n";
    return 2;
  }
  const TierStats stats = (*tier)->Stats();
  // Per namespace where the tier keeps it in its own metadata (shm://: the shared slots).
  std::vector<internal::NamespaceUsage> usage;
  if (auto u = internal::ShmNamespaceUsage(**tier); u.ok()) usage = std::move(u).value();
  if (a.prometheus) {
    std::cout << PrometheusText(std::span<const TierStats>(&stats, 1))
              << internal::PrometheusNamespaceUsageText(stats.url, usage);
    return 0;
  }
  nlohmann::ordered_json j = internal::TierStatsJson(stats);
  const TierCapabilities caps = (*tier)->capabilities();
  j["capabilities"] = {{"in_memory", caps.in_memory},
                       {"persistent", caps.persistent},
                       {"shared", caps.shared},
                       {"direct_io", caps.direct_io}};
  const internal::FileTierReport report = internal::GetFileTierReport(**tier);
  if (!report.io_engine.empty()) {
    j["open"] = {{"io_engine", report.io_engine},
                 {"read_only", report.read_only},
                 {"corrupt_found", report.corrupt_found},
                 {"newer_format_skipped", report.newer_skipped},
                 {"links_skipped", report.links_skipped},
                 {"special_files_skipped", report.special_skipped},
                 {"foreign_files_skipped", report.foreign_skipped}};
  }
  const object::ObjectTierReport object = object::GetObjectTierReport(**tier);
  if (!object.client.empty()) {
    j["object"] = {{"client", object.client},
                   {"requests", object.client_stats.requests},
                   {"client_retries", object.client_stats.retries},
                   {"client_errors", object.client_stats.errors},
                   {"tier_retries", object.tier_retries},
                   {"gave_up", object.gave_up},
                   {"inflight_bytes", object.inflight_bytes}};
  }
  if (!usage.empty()) j["namespaces"] = internal::NamespaceUsageJson(usage);
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  for (const auto& [name, value] : j.items()) {
    if (value.is_array()) {  // namespaces: one line each
      std::cout << name << ":\n";
      for (const auto& e : value) {
        std::cout << "  " << e["namespace"].get<std::string>() << "  chunks " << e["chunks"].dump() << "  bytes "
                  << e["bytes"].dump() << "\n";
      }
    } else if (value.is_object()) {
      std::cout << name << ":\n";
      for (const auto& [k, v] : value.items()) std::cout << "  " << k << "  " << v.dump() << "\n";
    } else {
      std::cout << name << "  " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    }
  }
  return 0;
}

}  // namespace

KVTIER_COMMAND("", "stats", "Print a tier's statistics (Stats()) after opening it",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<StatsArgs>();
                 cmd.add_option("--target", a->target, "tier URL, e.g. file:///var/lib/kvtier")->required();
                 auto* json = cmd.add_flag("--json", a->json, "print JSON");
                 cmd.add_flag("--prometheus", a->prometheus, "print the Prometheus text format")
                     ->excludes(json);
                 cmd.add_flag("--probe-reads", a->probe_reads,
                              "fs:// only: open the pool writable so the read probe runs (writes and removes "
                              "one probe file)");
                 return [a] { return RunStats(*a); };
               });

}  // namespace kvtier::tools
