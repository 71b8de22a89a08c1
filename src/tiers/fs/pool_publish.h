// Publication of a chunk into a shared pool without ever replacing a published name.
//
// The chunk is written to a fresh temporary beside its final name (io/dir_names.h) and published with
// link(2), which fails when the name exists: when two hosts publish the same chunk at once the first
// wins and the second drops its copy. A published name therefore keeps its file (its inode) until gc
// or a Remove unlinks it: nobody renames over a name that readers on other mounts hold, which on
// CephFS would move the file's capabilities between the clients on every such write. Where the
// filesystem refuses hard links (EOPNOTSUPP or EPERM, the name still absent) it falls back to
// rename(2), which replaces whatever was published in between; any other failed link fails the write.
//
// Thread-safe; every access goes through the pool's FileSystem.
#pragma once

#include <cstdint>

#include "io/chunk_dir.h"
#include "io/chunk_io.h"

namespace kvtier::internal {

struct Published {
  uint64_t stored_bytes = 0;  // bytes of the file written (0 when another writer's copy was kept)
  bool already_there = false;  // another writer published this chunk first; ours was removed
};

// Writes chunk `id` into `pool` (creating its directories when needed) and publishes it. On failure
// nothing is published and the temporary is removed. REQUIRES: `pool` is writable.
Result<Published> PublishChunk(ChunkDir& pool, const ChunkId& id, GatherList payload, const WriteOptions& options);

}  // namespace kvtier::internal
