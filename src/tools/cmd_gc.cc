// `kvtier gc`: keeps a shared fs:// pool under a size, evicting least recently used chunks, and removes
// temporaries left by writers that died. Safe to run while engines read and write the pool.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_gc.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct GcArgs {
  std::string target;
  std::string max_size;
  std::string grace = "10m";
  bool dry_run = false;
  bool quiet = false;
  bool json = false;
};

// The pool directory and size bound from --target and --max-size (or the URL's capacity=).
Result<internal::GcOptions> MakeOptions(const GcArgs& a, std::string* root) {
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(a.target));
  if (url.scheme != "fs") {
    return Status::InvalidArgument("gc works on shared pools: --target must be fs:///path, not " +
                                   url.scheme + "://");
  }
  KVTIER_ASSIGN_OR_RETURN(internal::FsTierOptions fs, internal::ParseFsTierOptions(url));
  internal::GcOptions o;
  o.max_bytes = fs.capacity_bytes;
  if (!a.max_size.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.max_bytes, ParseSize(a.max_size));
  } else if (o.max_bytes == 0) {
    return Status::InvalidArgument("give --max-size, or capacity= in the --target URL");
  }
  KVTIER_ASSIGN_OR_RETURN(o.grace, ParseDuration(a.grace));
  o.dry_run = a.dry_run;
  o.policy = fs.policy;  // --target fs:///pool?policy=window
  *root = fs.root;
  return o;
}

void PrintAction(const internal::GcAction& act, bool dry_run) {
  std::printf("%s %-10s %10s  idle %6llds  %s\n", dry_run ? "would remove" : "removed",
              std::string(internal::GcReasonName(act.reason)).c_str(), FormatBytes(act.bytes).c_str(),
              static_cast<long long>(act.idle_s), act.path.c_str());
}

void PrintReport(const internal::GcReport& r, const internal::GcOptions& o, bool json) {
  if (json) {
    nlohmann::json j = {{"dry_run", o.dry_run},
                        {"max_bytes", o.max_bytes},
                        {"chunks_scanned", r.chunks_scanned},
                        {"chunk_bytes_scanned", r.chunk_bytes_scanned},
                        {"live_temps", r.live_temps},
                        {"chunks_evicted", r.chunks_evicted},
                        {"bytes_evicted", r.bytes_evicted},
                        {"temps_removed", r.temps_removed},
                        {"temp_bytes_removed", r.temp_bytes_removed},
                        {"skipped_in_use", r.skipped_in_use},
                        {"corrupt_removed", r.corrupt_removed},
                        {"unverified_skipped", r.unverified},
                        {"remove_failed", r.remove_failed},
                        {"links_skipped", r.skipped.links},
                        {"special_files_skipped", r.skipped.special},
                        {"foreign_files_skipped", r.skipped.foreign},
                        {"bytes_after", r.bytes_after},
                        {"chunks_after", r.chunks_after}};
    std::cout << j.dump() << "\n";
    return;
  }
  std::printf("%s: scanned %llu chunks (%s); %s %llu chunks (%s) and %llu stale temporaries (%s); "
              "pool now %s in %llu chunks (limit %s)%s\n",
              o.dry_run ? "gc dry run" : "gc", static_cast<unsigned long long>(r.chunks_scanned),
              FormatBytes(r.chunk_bytes_scanned).c_str(), o.dry_run ? "would evict" : "evicted",
              static_cast<unsigned long long>(r.chunks_evicted), FormatBytes(r.bytes_evicted).c_str(),
              static_cast<unsigned long long>(r.temps_removed), FormatBytes(r.temp_bytes_removed).c_str(),
              FormatBytes(r.bytes_after).c_str(), static_cast<unsigned long long>(r.chunks_after),
              FormatBytes(o.max_bytes).c_str(),
              r.skipped_in_use ? (", " + std::to_string(r.skipped_in_use) + " in use skipped").c_str() : "");
}

int RunGc(const GcArgs& a) {
  std::string root;
  auto options = MakeOptions(a, &root);
  if (!options.ok()) {
    std::fprintf(stderr, "kvtier gc: %s\n", options.status().ToString().c_str());
    return 2;
  }
  const bool print_actions = !a.quiet && !a.json;
  auto report = internal::CollectPoolGarbage(root, *options, [&](const internal::GcAction& act) {
    if (print_actions) PrintAction(act, options->dry_run);
  });
  if (!report.ok()) {
    std::fprintf(stderr, "kvtier gc: %s\n", report.status().ToString().c_str());
    return 1;
  }
  PrintReport(*report, *options, a.json);
  if (report->remove_failed > 0) {  // a removal that failed is a failure, never a silent skip
    std::fprintf(stderr, "kvtier gc: %llu removals failed (permissions?)\n",
                 static_cast<unsigned long long>(report->remove_failed));
    return 1;
  }
  return 0;
}

KVTIER_COMMAND("", "gc",
               "Evict least recently used chunks from a shared fs:// pool until it fits, and remove "
               "stale temporaries",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<GcArgs>();
                 cmd.add_option("--target", a->target, "the pool, fs:///path")->required();
                 cmd.add_option("--max-size", a->max_size,
                                "evict until the pool fits this size, e.g. 500GiB (default: the "
                                "URL's capacity=)");
                 cmd.add_option("--grace", a->grace,
                                "temporaries older than this are left by dead writers: 600, 10m, 1h "
                                "(at most 100 years)")
                     ->default_val("10m");
                 cmd.add_flag("--dry-run", a->dry_run, "print what would be removed; remove nothing");
                 cmd.add_flag("--quiet", a->quiet, "print only the summary");
                 cmd.add_flag("--json", a->json, "print the summary as one JSON object");
                 return [a] { return RunGc(*a); };
               });

}  // namespace
}  // namespace kvtier::tools
