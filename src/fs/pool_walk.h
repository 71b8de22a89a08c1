// Walks the chunk tree of a shared pool (<root>/v1/<ns>/<aa>/<bb>/...), for List and gc.
//
// The walk reads directories as they are now; chunks published or removed by other processes during
// the walk may or may not be seen. Files kvtier does not recognise are reported as kOther and never
// touched. Thread-safe (no shared state).
#pragma once

#include <sys/stat.h>

#include <functional>
#include <string>

#include "fs/pool_layout.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct PoolEntry {
  std::string path;
  PoolEntryKind kind = PoolEntryKind::kOther;
  ChunkId id;             // kChunk only: ns and key from the path; layout_fingerprint is 0
  struct stat st {};      // lstat of the entry
};

// Calls `fn` for every regular file in the leaf directories until it returns false. Entries that
// vanish between readdir and stat are skipped. IOError when the chunk directory cannot be read.
Status WalkPool(const PoolLayout& layout, const std::function<bool(const PoolEntry&)>& fn);

}  // namespace kvtier::internal
