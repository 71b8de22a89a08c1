// `kvtier verify --target URL [--repair]`: reads every chunk of a tier and checks its header and payload
// checksum. A corrupt chunk is printed; with --repair the tier removes it (a later lookup misses it
// instead of loading bad bytes). Without --repair the tier is opened read-only and nothing on disk
// changes. Exit status: 0 when every chunk is sound, 1 when any is corrupt or unreadable, 2 when the
// target cannot be opened.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "kvtier/tier.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct VerifyArgs {
  std::string target;
  bool json = false;
  bool repair = false;
};

struct VerifyCounts {
  uint64_t checked = 0, sound = 0, corrupt = 0, unreadable = 0, gone = 0;
};

std::string ChunkName(const ChunkInfo& info) { return DigestHex(info.id.ns) + "/" + info.id.key.Hex(); }

int RunVerify(const VerifyArgs& a) {
  auto tier = OpenTier(a.target, TierOpenOptions{.read_only = !a.repair});
  if (!tier.ok()) {
    std::cerr << "kvtier verify: cannot open --target " << a.target << ": " << tier.status().ToString()
              << "\n";
    return 2;
  }
  std::vector<ChunkInfo> chunks;
  const Status listed = (*tier)->List([&](const ChunkInfo& info) {
    chunks.push_back(info);
    return true;
  });
  if (!listed.ok()) {
    std::cerr << "kvtier verify: listing " << a.target << " failed: " << listed.ToString() << "\n";
    return 1;
  }
  VerifyCounts n;
  nlohmann::json bad = nlohmann::json::array();
  for (const ChunkInfo& info : chunks) {
    const Status s = (*tier)->Check(info);
    ++n.checked;
    if (s.ok()) {
      ++n.sound;
    } else if (s.IsNotFound()) {
      ++n.gone;  // evicted or removed while we were checking: nothing wrong
    } else {
      ++(s.IsCorruption() ? n.corrupt : n.unreadable);
      const char* what = s.IsCorruption() ? "corrupt" : "unreadable";
      if (!a.json) std::cout << what << "  " << ChunkName(info) << "  " << s.ToString() << "\n";
      bad.push_back({{"chunk", ChunkName(info)}, {"problem", what}, {"status", s.ToString()}});
    }
  }
  if (a.json) {
    std::cout << nlohmann::json{{"url", (*tier)->url()}, {"repair", a.repair}, {"checked", n.checked}, {"sound", n.sound},
                                {"corrupt", n.corrupt}, {"unreadable", n.unreadable},
                                {"gone", n.gone},       {"problems", std::move(bad)}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "verified " << n.checked << " chunks of " << (*tier)->url() << ": " << n.sound
              << " sound, " << n.corrupt << (a.repair ? " corrupt (removed), " : " corrupt (left in place; --repair removes them), ")
              << n.unreadable << " unreadable, "
              << n.gone << " gone while checking\n";
  }
  return n.corrupt + n.unreadable == 0 ? 0 : 1;
}

}  // namespace

KVTIER_COMMAND("", "verify",
               "Check every chunk of a tier (header and checksum); exit 1 if any is corrupt",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<VerifyArgs>();
                 cmd.add_option("--target", a->target, "tier URL, e.g. file:///var/lib/kvtier")->required();
                 cmd.add_flag("--json", a->json, "print the summary and problems as JSON");
                 cmd.add_flag("--repair", a->repair, "remove corrupt chunks (otherwise nothing on disk changes)");
                 return [a] { return RunVerify(*a); };
               });

}  // namespace kvtier::tools
