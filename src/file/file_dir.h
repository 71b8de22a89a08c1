// Directory-level pieces of a file:// tier: the capacity record kept in DIR, and the O_DIRECT probe.
// Thread-safe (plain functions over the filesystem).
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::internal {

// Whether files in `dir` can be opened with O_DIRECT (tmpfs and some FUSE filesystems refuse it).
bool ProbeDirectIo(const std::string& dir);

// The capacity to enforce: `given` when non-zero (then recorded in DIR/kvtier.capacity for later
// opens), else the recorded one, else kDefaultFileCapacity. IOError when the record cannot be written.
Result<uint64_t> SettleCapacity(const std::string& dir, uint64_t given);

}  // namespace kvtier::internal
