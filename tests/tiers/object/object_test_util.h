// Helpers for the object tier tests: an ObjectTier over a fresh fake store, with recorded backoff.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvtier/keys.h"
#include "tiers/object/object_names.h"
#include "support/chunk_payload.h"
#include "tiers/object/object_scheme.h"
#include "tiers/object/object_tier.h"
#include "testing/fake_object_client.h"

namespace kvtier::testing {

inline Namespace ObjNs(std::string_view tenant = "t") {
  return *Namespace::Make("object/model", Layout{1, 1, 4, DType::kBF16, 1}, tenant);
}

inline ChunkId ObjId(const Namespace& ns, uint32_t i) { return TestChunkId(ns, i); }
inline std::vector<std::byte> ObjPayload(const ChunkId& id, size_t n) { return TestPayload(id, n); }

// A 32-byte key file of mode 0600 in `dir`.
inline std::string WriteKeyFile(const std::string& dir, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string key(32, '\0');
  for (char& c : key) c = static_cast<char>(rng());
  const std::string path = dir + "/key-" + std::to_string(seed);
  std::ofstream(path, std::ios::binary) << key;
  ::chmod(path.c_str(), 0600);
  return path;
}

class ObjectTierTestBase : public ::testing::Test {
 protected:
  // A tier over `store_`; every backoff delay is recorded instead of slept.
  std::unique_ptr<object::ObjectTier> Open(object::ObjectTierOptions o = {}, bool read_only = false) {
    return Open(std::make_unique<FakeObjectClient>(store_, scatter_), std::move(o), read_only);
  }

  std::unique_ptr<object::ObjectTier> Open(std::unique_ptr<object::ObjectClient> client,
                                           object::ObjectTierOptions o, bool read_only = false) {
    o.retry.sleep = [this](std::chrono::milliseconds d) { sleeps_.push_back(d); };
    auto t = object::OpenObjectTier(std::move(client), std::move(o), "objmem-test", read_only);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::unique_ptr<object::ObjectTier>(static_cast<object::ObjectTier*>(t->release()));
  }

  Status Put(Tier& tier, const ChunkId& id, size_t n = 3000) {
    const auto p = ObjPayload(id, n);
    const std::span<const std::byte> pieces[] = {p};
    return tier.Put(id, pieces);
  }

  // Reads into a buffer pre-filled with 0xEE; `out` receives what the tier left there.
  Status Get(Tier& tier, const ChunkId& id, std::vector<std::byte>* out, size_t n = 3000) {
    out->assign(n, std::byte{0xEE});
    const std::span<std::byte> pieces[] = {std::span(*out).first(n / 2), std::span(*out).subspan(n / 2)};
    return tier.Get(id, pieces);
  }

  static bool AllZero(const std::vector<std::byte>& v) {
    for (auto b : v) {
      if (b != std::byte{0}) return false;
    }
    return true;
  }

  std::string Name(const ChunkId& id) const { return object::ChunkObjectName("", id); }

  std::shared_ptr<FakeObjectStore> store_ = std::make_shared<FakeObjectStore>();
  bool scatter_ = true;  // the fake client lands payloads in the caller's pieces
  std::vector<std::chrono::milliseconds> sleeps_;
  Namespace ns_ = ObjNs();
};

}  // namespace kvtier::testing
