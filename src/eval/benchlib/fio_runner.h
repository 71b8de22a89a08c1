// The fio reference: the physical read limit of a directory, measured by fio in the same run as
// kvtier, reading the very files kvtier read (the tier's chunk files, read-only) with one request per
// file, O_DIRECT and a queue depth matching kvtier's bytes in flight.
//
// fio's buffers matter as much as its depth: an O_DIRECT request is one device request per physically
// contiguous run of its buffer (up to the device's segment limit, 254 on this VM's virtio disk), and
// kvtier reads into 2 MiB aligned huge-page memory. fio's own buffers are 4 KiB pages, which on the
// development VM cost it 3-4x (32 MiB reads at depth 4: 0.9-1.4 GB/s from 4 KiB pages, 3.6 GB/s from
// huge pages). Where a hugetlbfs mount has enough free huge pages (HugePageDirFor), fio's buffers come
// from there (`--iomem=mmaphuge`); otherwise the result says it read into 4 KiB pages.
//
// BuildFioArgs and ParseFioJson are pure; RunFio spawns the `fio` executable and waits for it (it may
// take as long as the read takes). All are thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct FioJob {
  // A read job reads `files` (never writes them: --readonly). A write job (`write`) instead writes
  // `write_files` new files of `block_size` bytes each, one request per file, in `link_dir` (which must
  // be empty of fio's names), and removes them at the end (--unlink=1).
  bool write = false;
  uint64_t write_files = 0;
  std::vector<std::string> files;  // existing files fio reads whole (never writes: --readonly)
  // fio takes at most 4096 bytes of file names, so RunFio hard-links `files` into this directory
  // (created if missing; same filesystem) as 0, 1, ... for `--opendir` and removes the links after.
  std::string link_dir;
  uint64_t block_size = 0;         // bytes per read: one file
  uint32_t iodepth = 1;            // reads in flight
  std::string ioengine = "io_uring";  // or "libaio", "psync"
  bool direct = true;              // O_DIRECT
  std::string hugepage_dir;        // a hugetlbfs mount for fio's buffers; empty: 4 KiB pages
  std::string output_path;         // fio writes its JSON here (--output)
};

// A hugetlbfs mount (from /proc/mounts) this process may write, holding at least `bytes` of free
// default-size huge pages (/proc/meminfo), or "" when there is none. Reads only.
std::string HugePageDirFor(uint64_t bytes);

// What `job`'s buffers are, for results: "huge pages (hugetlbfs at DIR)" or "4 KiB pages".
std::string FioMemoryText(const FioJob& job);

// Queue depth that keeps `inflight_bytes` in flight with `block_size` reads: at least 1.
uint32_t IodepthFor(uint64_t inflight_bytes, uint64_t block_size);

// The argv of the fio command (argv[0] == "fio"). InvalidArgument when a field is missing or zero.
Result<std::vector<std::string>> BuildFioArgs(const FioJob& job);

// The command as one shell-quoted line, for printing and for the results JSON.
std::string ShellJoin(const std::vector<std::string>& argv);

struct FioResult {
  double bytes_per_second = 0;  // read (or, for a write job, write) bandwidth (fio's bw_bytes)
  uint64_t bytes = 0;           // bytes read (written)
  double seconds = 0;           // runtime
  double p50_us = 0, p99_us = 0;  // completion latency percentiles of one read (one chunk)
  std::string ioengine;
  uint32_t iodepth = 0;
  std::string memory;  // FioMemoryText of the job ("dd": the reference read with dd)
  std::string command;
};

// Parses fio's --output-format=json: the "read" (or, with `write`, the "write") figures of its first
// job. Text before the first '{' (fio's warnings) is skipped. Corruption when the JSON is malformed or
// has no such job; InvalidArgument when it moved nothing.
Result<FioResult> ParseFioJson(std::string_view text, bool write = false);

// True when a `fio` executable is on PATH.
bool FioAvailable();

// The reference where fio is missing: `files` read whole by `dd iflag=direct bs=block_size
// of=/dev/null`, `depth` dd processes at once (each takes the next file). bytes_per_second counts
// the files' bytes over the wall time; ioengine "dd". IOError when dd cannot run or fails;
// InvalidArgument for no files or a zero block size.
Result<FioResult> RunDdReference(const std::vector<std::string>& files, uint64_t block_size, uint32_t depth);

// True when a `dd` executable is on PATH.
bool DdAvailable();

// Links job.files into job.link_dir (a write job: creates job.link_dir), runs fio for `job`, removes
// the links (fio removes a write job's files) and parses fio's output.
// IOError when a link cannot be made, or fio cannot start or exits non-zero (the message carries the
// command); a parse error otherwise.
Result<FioResult> RunFio(const FioJob& job);

// RunFio with job.ioengine, and once more with libaio when that fails and was not libaio already
// (a kernel or container without io_uring). The error of the last attempt otherwise.
Result<FioResult> RunFioWithFallback(FioJob job);

}  // namespace kvtier::internal
