// `kvtier inspect --target URL [--json]`: what a tier holds: chunks and bytes per namespace.
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "kvtier/tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct InspectArgs {
  std::string target;
  bool json = false;
};

struct Totals {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

int RunInspect(const InspectArgs& a) {
  auto tier = OpenTier(a.target, TierOpenOptions{.read_only = true});  // looking changes nothing
  if (!tier.ok()) {
    std::cerr << "kvtier inspect: cannot open --target " << a.target << ": " << tier.status().ToString()
              << "\n";
    return 2;
  }
  std::map<std::string, Totals> by_ns;
  Totals all;
  const Status s = (*tier)->List([&](const ChunkInfo& info) {
    Totals& t = by_ns[DigestHex(info.id.ns)];
    ++t.chunks;
    t.bytes += info.stored_bytes;
    ++all.chunks;
    all.bytes += info.stored_bytes;
    return true;
  });
  if (!s.ok()) {
    std::cerr << "kvtier inspect: listing " << a.target << " failed: " << s.ToString() << "\n";
    return 1;
  }
  const TierStats stats = (*tier)->Stats();
  if (a.json) {
    nlohmann::json ns = nlohmann::json::array();
    for (const auto& [hex, t] : by_ns) ns.push_back({{"namespace", hex}, {"chunks", t.chunks}, {"bytes", t.bytes}});
    nlohmann::json j = {{"url", stats.url},           {"chunks", all.chunks},
                        {"bytes", all.bytes},         {"capacity_bytes", stats.capacity_bytes},
                        {"namespaces", std::move(ns)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "tier        " << stats.url << "\n"
            << "chunks      " << all.chunks << "\n"
            << "bytes       " << all.bytes << " (" << FormatBytes(all.bytes) << ")\n"
            << "capacity    "
            << (stats.capacity_bytes == 0 ? std::string("unbounded") : FormatBytes(stats.capacity_bytes))
            << "\n"
            << "namespaces  " << by_ns.size() << "\n";
  for (const auto& [hex, t] : by_ns) {
    std::cout << "  " << hex << "  " << t.chunks << " chunks  " << FormatBytes(t.bytes) << "\n";
  }
  return 0;
}

}  // namespace

KVTIER_COMMAND("", "inspect", "Show what a tier holds: chunks and bytes per namespace",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<InspectArgs>();
                 cmd.add_option("--target", a->target, "tier URL, e.g. file:///var/lib/kvtier")->required();
                 cmd.add_flag("--json", a->json, "print JSON");
                 return [a] { return RunInspect(*a); };
               });

}  // namespace kvtier::tools
