#include "conformance/tier_cases.h"

#include "file/file_tier.h"
#include "fs/fs_tier.h"
#include "mem/mem_tier.h"
#include "core/chunk_format.h"
#include "object/object_names.h"
#include "testing/fake_object_client.h"

namespace kvtier::testing {

const std::vector<TierCase>& TierCases() {
  // One row per tier. Add yours here.
  RegisterObjmemScheme();  // the object tier over its in-memory fake store (test binaries only)
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
      {"objmem",
       [](const std::string& dir, uint64_t cap) {
         return "objmem://" + dir + "?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return FakeStoreAt(dir)->FlipByte(object::ChunkObjectName("", id), internal::kChunkHeaderSize);
       }},
  };
  return cases;
}

}  // namespace kvtier::testing
