// Test chunks whose bytes are derived from their identity, so any returned payload can be checked
// against the chunk it claims to be. Shared by every test folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/keys.h"
#include "kvtier/tier.h"

namespace kvtier::testing {

// Chunk `i` of `ns`: the key of a one-token prompt {i}.
inline ChunkId TestChunkId(const Namespace& ns, uint32_t i) {
  const uint32_t token[] = {i};
  return ChunkId::Of(ns, NextChunkKey(ns, nullptr, token));
}

// `n` bytes of an xorshift stream seeded by the chunk's key.
inline std::vector<std::byte> TestPayload(const ChunkId& id, uint64_t n) {
  std::vector<std::byte> p(n);
  uint64_t x = ChunkKeyHash{}(id.key) | 1;
  for (auto& b : p) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return p;
}

}  // namespace kvtier::testing
