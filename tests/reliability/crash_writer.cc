// kvtier_crash_writer: the victim of the crash-cycle test. Opens the tiers named on its command line,
// prints "ready", then saves (and now and then removes) chunks in a tight loop until it is killed.
// Payloads are PayloadFor(id), so the test can check every surviving chunk byte for byte.
//   kvtier_crash_writer <seed> <tier url>...
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "reliability/test_util.h"

int main(int argc, char** argv) {
  using namespace kvtier;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <seed> <tier url>...\n", argv[0]);
    return 2;
  }
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 10));
  std::vector<std::unique_ptr<Tier>> tiers;
  for (int i = 2; i < argc; ++i) {
    auto t = OpenTier(argv[i]);
    if (!t.ok()) {
      std::fprintf(stderr, "open %s: %s\n", argv[i], t.status().ToString().c_str());
      return 1;
    }
    tiers.push_back(std::move(t).value());
  }
  const Namespace ns = reltest::MakeNamespace("crash-tenant");
  // A key space a few times the tiers' capacity, so evictions run (and get interrupted) too.
  const std::vector<ChunkKey> keys = reltest::Keys(ns, 512, 7);
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t n = 0;; ++n) {
    const ChunkKey& key = keys[rng() % keys.size()];
    for (auto& tier : tiers) {
      if (rng() % 16 == 0) {
        (void)tier->Remove(ChunkId::Of(ns, key));
      } else {
        (void)reltest::PutExpected(*tier, ns, key);  // failures are allowed; wrong bytes are not
      }
    }
  }
}
