// What shm_test and shm_pool_worker agree on: the keys and each key's payload size.
#pragma once

#include <cstdint>

#include "kvtier/keys.h"
#include "support/chunk_payload.h"

namespace kvtier::shmtest {

inline constexpr uint32_t kKeys = 64;  // shared by every worker; more than the test pools hold

inline const Namespace& TestNs() {
  static const Namespace ns = *Namespace::Make("shm-test/model", Layout{1, 1, 4, DType::kBF16, 1}, "tenant");
  return ns;
}
inline ChunkId IdOf(uint32_t i) { return testing::TestChunkId(TestNs(), i); }
// Sizes from 1 KB to about 1.3 MB (two 1 MiB pieces); keys past kKeys are the evictor's 2 MB chunks.
inline uint64_t SizeOf(uint32_t i) { return i >= kKeys ? 2000000 : 1000 + (uint64_t{i} * 7919u * 37u) % 1300000; }

}  // namespace kvtier::shmtest
