// `kvtier inspect --target URL [--json]`: what a tier holds: chunks and bytes per namespace, and the
// engine identity each namespace was written under where the tier keeps one (file://, fs://). The
// identity is read from the namespace's descriptor and only displayed: a malformed one is reported as
// such, never interpreted. Everything printed that came from the tier (its descriptors, its messages)
// goes through TerminalSafe: a planted descriptor cannot drive the operator's terminal.
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/terminal_text.h"
#include "kvtier/engine_identity.h"
#include "kvtier/tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

using internal::TerminalSafe;

struct InspectArgs {
  std::string target;
  bool json = false;
};

struct Totals {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

// What the tier says about a namespace: its identity's fields, or why there are none to show.
struct Described {
  std::optional<EngineIdentity> identity;
  std::string note;  // "none kept", "unreadable: ..." when identity is empty
};

Described Describe(Tier& tier, const std::string& hex) {
  Described d;
  auto digest = DigestFromHex(hex);
  if (!digest.ok()) return Described{std::nullopt, "unreadable namespace id"};
  auto text = tier.NamespaceDescription(*digest);
  if (!text.ok()) {
    d.note = text.status().IsNotFound() ? "none kept" : "unreadable: " + text.status().message();
    return d;
  }
  auto id = EngineIdentity::Parse(*text);
  if (!id.ok()) {
    d.note = "unreadable: " + id.status().message();
    return d;
  }
  d.identity = std::move(*id);
  return d;
}

int RunInspect(const InspectArgs& a) {
  auto tier = OpenTier(a.target, TierOpenOptions{.read_only = true});  // looking changes nothing
  if (!tier.ok()) {
    std::cerr << "kvtier inspect: cannot open --target " << TerminalSafe(a.target) << ": "
              << TerminalSafe(tier.status().ToString()) << "\n";
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
    std::cerr << "kvtier inspect: listing " << TerminalSafe(a.target) << " failed: " << TerminalSafe(s.ToString()) << "\n";
    return 1;
  }
  const TierStats stats = (*tier)->Stats();
  if (a.json) {
    nlohmann::json ns = nlohmann::json::array();
    for (const auto& [hex, t] : by_ns) {
      nlohmann::json entry = {{"namespace", hex}, {"chunks", t.chunks}, {"bytes", t.bytes}};
      const Described d = Describe(**tier, hex);
      if (d.identity) {
        entry["identity"] = d.identity->fields();
      } else {
        entry["identity_note"] = d.note;
      }
      ns.push_back(std::move(entry));
    }
    nlohmann::json j = {{"url", stats.url},           {"chunks", all.chunks},
                        {"bytes", all.bytes},         {"capacity_bytes", stats.capacity_bytes},
                        {"namespaces", std::move(ns)}};
    // ASCII only (\uXXXX for the rest, control characters included); malformed UTF-8 replaced, not thrown.
    std::cout << j.dump(2, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::cout << "tier        " << TerminalSafe(stats.url) << "\n"
            << "chunks      " << all.chunks << "\n"
            << "bytes       " << all.bytes << " (" << FormatBytes(all.bytes) << ")\n"
            << "capacity    "
            << (stats.capacity_bytes == 0 ? std::string("unbounded") : FormatBytes(stats.capacity_bytes))
            << "\n"
            << "namespaces  " << by_ns.size() << "\n";
  for (const auto& [hex, t] : by_ns) {
    std::cout << "  " << hex << "  " << t.chunks << " chunks  " << FormatBytes(t.bytes) << "\n";
    const Described d = Describe(**tier, hex);
    if (!d.identity) {
      std::cout << "    identity: " << TerminalSafe(d.note) << "\n";
      continue;
    }
    std::cout << "    identity:";
    for (const auto& [name, value] : d.identity->fields()) {
      std::cout << " " << TerminalSafe(name) << "=" << TerminalSafe(value);
    }
    std::cout << "\n";
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
