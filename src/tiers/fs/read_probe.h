// How fs:// reads a pool: with O_DIRECT or through the page cache, chosen per mount when the tier opens.
//
// A shared filesystem may refuse O_DIRECT, accept it and fail the reads, or serve it correctly but
// slower than buffered reads (CephFS through ceph-fuse: every O_DIRECT read is one synchronous FUSE
// request, while buffered reads get the kernel's readahead). With direct=auto a writable open times
// both on a probe chunk it writes in the pool's own directory and removes again:
//
//   <pool>/READPROBE.kvtmp.<writer>.<pid>.<nonce>.<n>     a 4 MiB plain chunk (io/dir_names.h's temporary)
//
// It is read kProbeRounds times each way through the tier's own ChunkReader, dropping the file's
// cached pages (fsync + POSIX_FADV_DONTNEED) before every read, so both ways read from storage as a
// chunk written by another host would be read. Every read is verified and compared with what was
// written: a mode whose read fails or differs is never chosen. O_DIRECT stays unless buffered reads
// are clearly faster (O_DIRECT under kKeepDirectRatio of buffered): it keeps the page cache for the
// engine. The probe is bounded (kProbeBytes written once, 2 x kProbeRounds reads, kProbeDeadline).
//
// A read-only open (`kvtier stats`, `inspect`, `verify`) writes nothing: it reuses what a writable
// open in this process found on the same mount (same st_dev), else it says it timed nothing and
// picks by filesystem: buffered on FUSE and network filesystems (statfs: FUSE, CephFS, NFS, SMB,
// Lustre), where an O_DIRECT read is a synchronous request, else O_DIRECT when the filesystem accepts
// it on the pool's marker. A probe that cannot be written (a full pool) decides the same way.
// Probe files of processes that died mid-probe are removed at the next writable probe (only kvtier's
// own READPROBE temporaries, by the gc leftover rule).
//
// Thread-safe (the process-wide cache is locked).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/chunk_cipher.h"
#include "io/chunk_dir.h"
#include "kvtier/status.h"

namespace kvtier::internal {

enum class FsDirectMode : uint8_t { kAuto, kOn, kOff };

// "auto", "on" or "off" (and, as before, the booleans: true/1 is on, false/0 is off).
Result<FsDirectMode> ParseFsDirectMode(std::string_view text);

inline constexpr std::string_view kReadProbeName = "READPROBE";
inline constexpr uint64_t kProbeBytes = 4ull << 20;
inline constexpr int kProbeRounds = 3;
inline constexpr std::chrono::milliseconds kProbeDeadline{3000};
inline constexpr double kKeepDirectRatio = 0.8;

struct ReadModeChoice {
  bool direct = false;
  std::string reason;            // one line for stats: what was chosen and why
  double direct_gbps = 0;        // measured by the probe; 0 when not timed
  double buffered_gbps = 0;
};

// The read knobs the probe reads with (the tier's own, so the probe times the tier's read path).
struct ReadProbeOptions {
  FsDirectMode mode = FsDirectMode::kAuto;
  bool read_only = false;
  bool io_uring = true;
  uint64_t inflight_bytes = 256ull << 20;
  unsigned verify_threads = 0;
  bool use_cache = true;  // false: always probe (tests), and remember nothing
  // false: write no probe file and time nothing (a FileSystem injected by a test, whose faults the
  // probe's reads would consume); auto then decides as a read-only open does.
  bool timed = true;
};

// Chooses how the tier on `pool` reads (see the file comment). Never fails: a probe that cannot run
// falls back to what the marker probe says and the reason says why.
ReadModeChoice ChooseReadMode(ChunkDir& pool, const ReadProbeOptions& options);

// The rule auto applies to the probe's best times: O_DIRECT unless it is under kKeepDirectRatio of
// buffered.
bool KeepDirect(double direct_gbps, double buffered_gbps);

// The text after "O_DIRECT"/"buffered" in stats, e.g. "O_DIRECT (auto: ...)".
std::string DescribeReadMode(const ReadModeChoice& choice);

}  // namespace kvtier::internal
