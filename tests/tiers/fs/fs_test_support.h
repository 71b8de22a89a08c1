// Helpers shared by the fs:// tests and their worker process: a temporary directory, a small layout,
// and payloads derived from their key so any process can check what it loaded.
#pragma once

#include "support/temp_dir.h"

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kvtier/keys.h"
#include "kvtier/tier.h"

namespace kvtier::fstest {
using kvtier::testing::TempDir;

// 2 layers x 2 heads x 64 dims x bf16 x 16 tokens: 16 KiB chunks keep multi-process tests quick.
inline Layout SmallLayout() {
  return Layout{.layers = 2, .kv_heads = 2, .head_dim = 64, .dtype = DType::kBF16, .tokens_per_chunk = 16};
}

inline Namespace TestNamespace(const std::string& tenant = "fs-test") {
  return Namespace::Make("kvtier/fs-test-model", SmallLayout(), tenant).value();
}

// Key number `i` of a synthetic prompt stream (the chained key of chunk i of tokens seeded by `seed`).
inline std::vector<ChunkKey> TestKeys(const Namespace& ns, size_t count, uint32_t seed = 1) {
  const uint32_t tpc = ns.layout().tokens_per_chunk;
  std::vector<uint32_t> tokens(count * tpc);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u) ^ seed;
  return ComputeChunkKeys(ns, tokens);
}

inline uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The payload every process saves under `key`: a pseudo-random stream seeded by the key.
inline std::vector<std::byte> PayloadFor(const ChunkKey& key, size_t bytes) {
  std::vector<std::byte> out(bytes);
  uint64_t state;
  std::memcpy(&state, key.bytes.data(), sizeof(state));
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = SplitMix(state);
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, bytes - i));
  }
  return out;
}

// One-piece scatter/gather views of a vector, kept alive by the caller.
struct OnePiece {
  explicit OnePiece(std::vector<std::byte>& v) : piece(v.data(), v.size()), cpiece(v.data(), v.size()) {}
  std::span<std::byte> piece;
  std::span<const std::byte> cpiece;
  ScatterList dst() const { return ScatterList(&piece, 1); }
  GatherList src() const { return GatherList(&cpiece, 1); }
};

}  // namespace kvtier::fstest
