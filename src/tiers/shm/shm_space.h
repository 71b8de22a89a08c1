// Room for a new shm:// pool file, checked and taken before the pool gets its name (docs/shared-pool.md,
// docs/security.md "issue 39"): a pool larger than its filesystem's free space (a Docker container's
// 64 MiB /dev/shm) or than the host's memory is refused, and the file's pages are reserved up front, so
// a full tmpfs answers NoSpace at creation instead of SIGBUS at the first page it cannot back.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::internal::shm {

// NoSpace when `bytes` exceed the free space of the filesystem holding `fd` (a file in `dir`) or the
// host's physical memory; IOError when the filesystem cannot be asked.
Status CheckRoom(int fd, const std::string& dir, uint64_t bytes, uint64_t capacity);

// Allocates every page of the file (fallocate); NoSpace when the filesystem runs out meanwhile. A
// filesystem without fallocate keeps the check of CheckRoom alone.
Status ReservePages(int fd, const std::string& dir, uint64_t bytes);

}  // namespace kvtier::internal::shm
