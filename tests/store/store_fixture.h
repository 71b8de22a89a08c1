// Shared helpers for the Store tests: a tiny layout (128-byte chunks), prompts, payloads derived from
// the chunk key (so any loaded byte can be checked), and Save/Load wrappers.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kvtier/store.h"
#include "tiers/mem/mem_tier.h"
#include "store/forwarding_tier.h"

namespace kvtier::testing {

inline Layout TinyLayout() { return Layout{2, 1, 4, DType::kBF16, 4}; }  // 128 bytes per chunk

inline std::unique_ptr<Tier> OpenMem(const std::string& options = "capacity=64KiB&page=64") {
  auto t = OpenTier("mem://?" + options);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

inline std::shared_ptr<Tier> OpenSharedMem(const std::string& options = "capacity=64KiB&page=64") {
  return std::shared_ptr<Tier>(OpenMem(options));
}

class StoreTestBase : public ::testing::Test {
 protected:
  // Keys of a prompt of `chunks` chunks; `seed` makes different prompts.
  std::vector<ChunkKey> Keys(size_t chunks, uint32_t seed = 1) const {
    std::vector<uint32_t> tokens(chunks * TinyLayout().tokens_per_chunk);
    std::iota(tokens.begin(), tokens.end(), seed * 100000u);
    return ComputeChunkKeys(ns_, tokens);
  }

  std::vector<std::byte> PayloadOf(const ChunkKey& key) const {
    std::vector<std::byte> p(bytes_);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>(key.bytes[i % 32] + i);
    return p;
  }

  Status Save(Store& store, std::span<const ChunkKey> keys) {
    std::vector<std::vector<std::byte>> data;
    std::vector<std::span<const std::byte>> pieces;
    for (const auto& k : keys) data.push_back(PayloadOf(k));
    for (const auto& d : data) pieces.emplace_back(d);
    std::vector<GatherList> srcs;
    for (const auto& p : pieces) srcs.emplace_back(&p, 1);
    return store.Save(ns_, keys, srcs);
  }

  // Loads into two pieces per chunk and checks every loaded chunk's bytes.
  Result<size_t> Load(Store& store, std::span<const ChunkKey> keys) {
    std::vector<std::vector<std::byte>> out(keys.size(), std::vector<std::byte>(bytes_));
    std::vector<std::array<std::span<std::byte>, 2>> pieces;
    for (auto& o : out) pieces.push_back({std::span(o).first(50), std::span(o).subspan(50)});
    std::vector<ScatterList> dsts;
    for (const auto& p : pieces) dsts.emplace_back(p);
    auto n = store.Load(ns_, keys, dsts);
    if (n.ok()) {
      for (size_t i = 0; i < *n; ++i) EXPECT_TRUE(out[i] == PayloadOf(keys[i])) << "chunk " << i;
    }
    return n;
  }

  Namespace ns_ = *Namespace::Make("test/model", TinyLayout(), "tenant");
  const uint64_t bytes_ = TinyLayout().BytesPerChunk();
};

}  // namespace kvtier::testing
