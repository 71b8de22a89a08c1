// `kvtier models`: the model presets kvtier knows (kvtier/layout.h), each with its layout groups and
// KV bytes per token and per chunk. Only looks: opens nothing, writes nothing.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kvtier/layout.h"
#include "kvtier/tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct ModelsArgs {
  bool json = false;
  bool specs = false;
};

// "61 latent" / "18 window(128) + 18 kv" / "32 kv (classic)".
std::string GroupSummary(const Layout& l) {
  std::string out;
  for (const LayerGroup& g : l.Groups()) {
    out += out.empty() ? "" : " + ";
    out += std::to_string(g.layers.size()) + " " + std::string(GroupKindName(g.kind));
    if (g.kind == GroupKind::kWindowKV) out += "(" + std::to_string(g.window) + ")";
  }
  return out + (l.classic() ? " (classic)" : "");
}

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::json PresetJson(const ModelPreset& p) {
  return {{"name", p.name},
          {"model_id", p.model_id},
          {"layout", p.layout.Spec()},
          {"classic", p.layout.classic()},
          {"fingerprint", Hex64(p.layout.Fingerprint())},  // a string: JSON readers lose bits past 2^53
          {"kv_heads", p.layout.HeadSplitHeads()},
          {"bytes_per_token", p.layout.BytesPerToken()},
          {"bytes_per_chunk", p.layout.BytesPerChunk()},
          {"tokens_per_chunk", p.layout.tokens_per_chunk},
          {"source", p.source}};
}

int RunModels(const ModelsArgs& a) {
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ModelPreset& p : ModelPresets()) out.push_back(PresetJson(p));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-22s %-40s %8s %10s %11s  %s\n", "preset", "groups", "kv heads", "KV/token", "KV/chunk",
              "model");
  for (const ModelPreset& p : ModelPresets()) {
    const Layout& l = p.layout;
    std::printf("%-22s %-40s %8u %10s %11s  %s\n", std::string(p.name).c_str(), GroupSummary(l).c_str(),
                l.HeadSplitHeads(), FormatBytes(l.BytesPerToken()).c_str(), FormatBytes(l.BytesPerChunk()).c_str(),
                std::string(p.model_id).c_str());
    if (a.specs) std::printf("    %s\n    source: %s\n", l.Spec().c_str(), std::string(p.source).c_str());
  }
  std::printf("KV/chunk: %u tokens of every per-token group, plus each per-sequence state once; "
              "docs/models.md\n", kDefaultTokensPerChunk);
  return 0;
}

}  // namespace

KVTIER_COMMAND("", "models", "List the model presets: layout groups, KV bytes per token and per chunk",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<ModelsArgs>();
                 auto* json = cmd.add_flag("--json", a->json, "print JSON (every field, exact byte counts)");
                 cmd.add_flag("--specs", a->specs, "print each layout's spec and its source")->excludes(json);
                 return [a] { return RunModels(*a); };
               });

}  // namespace kvtier::tools
