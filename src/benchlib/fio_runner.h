// The fio reference: the physical read limit of a directory, measured by fio in the same run as
// kvtier, with the same block size (one chunk), O_DIRECT and a queue depth matching kvtier's bytes in
// flight. fio lays out its own files (one per chunk, chunk-sized) in a directory the caller chooses,
// then reads each once.
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
  std::string directory;           // fio's files live here (created by fio when missing)
  uint64_t block_size = 0;         // bytes per read: one chunk
  uint64_t files = 0;              // one file per chunk, each block_size bytes
  uint32_t iodepth = 1;            // reads in flight
  std::string ioengine = "io_uring";  // or "libaio", "psync"
  bool direct = true;              // O_DIRECT
  std::string output_path;         // fio writes its JSON here (--output)
};

// Queue depth that keeps `inflight_bytes` in flight with `block_size` reads: at least 1.
uint32_t IodepthFor(uint64_t inflight_bytes, uint64_t block_size);

// The argv of the fio command (argv[0] == "fio"). InvalidArgument when a field is missing or zero.
Result<std::vector<std::string>> BuildFioArgs(const FioJob& job);

// The command as one shell-quoted line, for printing and for the results JSON.
std::string ShellJoin(const std::vector<std::string>& argv);

struct FioResult {
  double bytes_per_second = 0;  // read bandwidth (fio's bw_bytes)
  uint64_t bytes = 0;           // bytes read
  double seconds = 0;           // read runtime
  double p50_us = 0, p99_us = 0;  // completion latency percentiles of one read (one chunk)
  std::string ioengine;
  uint32_t iodepth = 0;
  std::string command;
};

// Parses fio's --output-format=json. Text before the first '{' (fio's warnings) is skipped.
// Corruption when the JSON is malformed or has no read job; InvalidArgument when it read nothing.
Result<FioResult> ParseFioJson(std::string_view text);

// True when a `fio` executable is on PATH.
bool FioAvailable();

// The reference where fio is missing: `files` read whole by `dd iflag=direct bs=block_size
// of=/dev/null`, `depth` dd processes at once (each takes the next file). bytes_per_second counts
// the files' bytes over the wall time; ioengine "dd". IOError when dd cannot run or fails;
// InvalidArgument for no files or a zero block size.
Result<FioResult> RunDdReference(const std::vector<std::string>& files, uint64_t block_size, uint32_t depth);

// True when a `dd` executable is on PATH.
bool DdAvailable();

// Runs fio for `job` and parses its output. IOError when fio cannot start or exits non-zero (the
// message carries the command); a parse error otherwise.
Result<FioResult> RunFio(const FioJob& job);

}  // namespace kvtier::internal
