#include "conformance/tier_cases.h"

#include "file/file_tier.h"
#include "fs/fs_tier.h"
#include "mem/mem_tier.h"

namespace kvtier::testing {

const std::vector<TierCase>& TierCases() {
  // One row per tier. Add yours here.
  static const std::vector<TierCase> cases = {
      {"mem",
       [](const std::string&, uint64_t cap) {
         return "mem://?capacity=" + std::to_string(cap) + "&page=256&verify=true";
       },
       [](Tier& tier, const std::string&, const ChunkId& id) {
         return internal::CorruptMemChunkForTesting(tier, id);
       }},
      {"file",
       [](const std::string& dir, uint64_t cap) {
         return "file://" + dir + "?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return internal::CorruptFileChunkForTesting(dir, id);
       }},
      {"fs",
       [](const std::string& dir, uint64_t cap) {
         return "fs://" + dir + "/pool?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return internal::CorruptPoolChunkForTesting(dir + "/pool", id);
       }},
  };
  return cases;
}

}  // namespace kvtier::testing
