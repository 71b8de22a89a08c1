// The pools in a directory, for `kvtier shm list` and `kvtier shm remove`. Listing opens every pool
// read-only and changes nothing; removing unlinks one pool file after checking it is a kvtier pool of
// this user (processes that have it mapped keep their mapping and refuse further writes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct ShmPoolInfo {
  std::string name;  // the pool name (the file is kvtier-shm-NAME)
  std::string path;
  Status status;     // why the file is not a usable pool, or OK
  bool temporary = false;  // a creator's unfinished file (kvtier-shm-NAME.init.PID.N)
  uint64_t file_bytes = 0, capacity_bytes = 0, usage_bytes = 0, chunks = 0, page_bytes = 0;
  uint64_t repairs = 0, reclaimed = 0, evictions = 0;
};

Result<std::vector<ShmPoolInfo>> ListShmPools(const std::string& dir);
Status RemoveShmPool(const std::string& dir, const std::string& name);

}  // namespace kvtier::internal
