// Storage helpers of the datapath bench: free-space checks, dropping the page cache, and the two
// references that need no tier (a serial one-chunk-at-a-time pread, and a plain memcpy).
// Functions are thread-compatible; none keeps state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/benchlib/results.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// Bytes available to an unprivileged writer on the filesystem holding `path` (or its nearest existing
// ancestor, since the bench directory may not exist yet). IOError when statvfs fails.
Result<uint64_t> FreeBytesAt(const std::string& path);

// NoSpace, with a message saying how much is free, how much is needed and what to do, when
// `free_bytes` < `need_bytes`. `what` names the place, e.g. "target directory /nvme/kv".
Status CheckEnoughSpace(const std::string& what, uint64_t free_bytes, uint64_t need_bytes,
                        const std::string& breakdown);

// MemAvailable from /proc/meminfo. IOError when it cannot be read.
Result<uint64_t> AvailableMemoryBytes();

// Writes back and drops the cached pages of every regular file under `dir` (fdatasync, then
// posix_fadvise DONTNEED), so the next read comes from the device. Returns the files touched.
Result<uint64_t> DropPageCache(const std::string& dir);

// Regular files under `dir` (recursively) whose size is exactly `size`, sorted by path.
std::vector<std::string> FilesOfSize(const std::string& dir, uint64_t size);

// Reads each file whole with one buffered pread loop, one file at a time: how a naive offload reads.
// `payload_bytes` per file is what counts as delivered. IOError on the first failing file.
Result<PhaseResult> SerialPread(const std::vector<std::string>& files, uint64_t payload_bytes);

// Copies `src` into consecutive `chunk_bytes` pieces of `dst` on one thread (dst.size() bytes).
// With `checksum`, also computes the payload checksum of each piece first: the CPU work a verified
// load does per chunk on top of the I/O.
PhaseResult MemcpyReference(std::span<std::byte> dst, std::span<const std::byte> src,
                            uint64_t chunk_bytes, bool checksum = false);

// "2026-11-29T11:32:57Z".
std::string UtcNow();

// A rate as the benches print it: "1.25 GB/s" (10^9 bytes per second).
std::string GbpsText(double bytes_per_second);

}  // namespace kvtier::internal
