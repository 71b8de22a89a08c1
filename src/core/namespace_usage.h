// NamespaceUsage: what one namespace holds in a tier now (chunks, and the bytes they count against the
// tier's capacity), for a tier that can say so from its own metadata (shm://: the shared slots). Shown
// by `kvtier stats` (JSON, table and Prometheus text, docs/metrics.md).
#pragma once

#include <cstdint>

#include "kvtier/keys.h"

namespace kvtier::internal {

struct NamespaceUsage {
  Digest ns{};
  uint64_t chunks = 0;
  uint64_t bytes = 0;  // counted against capacity (whole pages for shm://)
};

}  // namespace kvtier::internal
