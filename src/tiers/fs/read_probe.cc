#include "tiers/fs/read_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "core/thread_annotations.h"
#include "io/chunk_io.h"
#include "io/dir_names.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

// What writable opens in this process measured, per device (each mount has its own st_dev).
struct ProbeCache {
  Mutex mu;
  std::map<uint64_t, ReadModeChoice> by_device GUARDED_BY(mu);
};

ProbeCache& Cache() {
  static ProbeCache* cache = new ProbeCache();  // never destroyed: tiers may open during exit
  return *cache;
}

bool DeviceOf(const std::string& root, uint64_t* dev) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return false;
  *dev = static_cast<uint64_t>(st.st_dev);
  return true;
}

std::string Gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB/s", v);
  return buf;
}

// Removes READPROBE temporaries whose writer is gone (a process killed mid-probe); nothing else.
void RemoveStaleProbes(FileSystem& fs) {
  auto entries = fs.List("");
  if (!entries.ok()) return;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (const DirEntry& e : *entries) {
    if (e.type != FileType::kRegular) continue;
    auto temp = ParseTempName(e.name, [](std::string_view n) { return n == kReadProbeName; });
    if (!temp) continue;
    auto st = fs.Stat(e.name);
    if (st.ok() && st->type == FileType::kRegular &&
        IsStaleTemp(*temp, st->mtime_ns, now_ns, std::chrono::minutes(10))) {
      (void)fs.Unlink(e.name);
    }
  }
}

// The probe file: a plain chunk of kProbeBytes in the pool's root, removed by the destructor.
class ProbeFile {
 public:
  explicit ProbeFile(FileSystem& fs) : fs_(fs), name_(MakeTempName(kReadProbeName)), payload_(kProbeBytes) {
    uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    for (size_t i = 0; i < payload_.size(); i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(payload_.data() + i, &x, std::min<size_t>(8, payload_.size() - i));
    }
    id_.key.bytes[0] = 0x70;  // any id: the header names it and the reader checks it
  }
  ~ProbeFile() {
    if (created_) (void)fs_.Unlink(name_);
  }

  Status Write() {
    KVTIER_ASSIGN_OR_RETURN(Fd fd, fs_.CreateNew(name_));
    created_ = true;
    const std::span<const std::byte> piece(payload_);
    auto written = WriteChunkBody(fs_, fd.get(), fs_.root() + "/" + name_, id_, GatherList(&piece, 1),
                                  WriteOptions{.sync = true});
    return written.status();
  }

  // Drops the file's cached pages, so the next read comes from storage.
  void DropCache() {
    auto fd = fs_.OpenForRead(name_, /*direct=*/false);
    if (fd.ok()) (void)::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_DONTNEED);
  }

  // One verified read with `reader`; the seconds it took, or the failure.
  Result<double> TimedRead(ChunkReader& reader, std::vector<std::byte>& out) {
    std::fill(out.begin(), out.end(), std::byte{0});
    const std::span<std::byte> piece(out);
    ChunkRead read{&fs_, name_, id_, ScatterList(&piece, 1), Status::OK(), 0};
    const auto start = Clock::now();
    reader.ReadMany(std::span<ChunkRead>(&read, 1));
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!read.status.ok()) return read.status;
    if (out != payload_) return Status::Corruption("probe read returned other bytes than were written");
    return s;
  }

 private:
  FileSystem& fs_;
  const std::string name_;
  std::vector<std::byte> payload_;
  ChunkId id_;
  bool created_ = false;
};

struct Timing {
  double best_s = 0;  // 0: no good read
  Status failure = Status::OK();
};

// FUSE and network filesystems: an O_DIRECT read there is one synchronous request to a server (no
// readahead), slower than buffered reads wherever it was measured (ceph-fuse: 0.62x, issue 14).
// Empty for the others.
std::string RemoteKind(const std::string& root) {
  struct statfs fs;
  if (::statfs(root.c_str(), &fs) != 0) return "";
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0x65735546ul: return "FUSE";
    case 0x00c36400ul: return "CephFS";
    case 0x6969ul: return "NFS";
    case 0xff534d42ul: case 0xfe534d42ul: return "SMB";
    case 0x0bd00bd0ul: return "Lustre";
    default: return "";
  }
}

// Where nothing was timed: O_DIRECT where the marker reads with it, except on FUSE and network
// filesystems, which read buffered.
ReadModeChoice Fallback(bool direct_ok, const std::string& why, const std::string& root) {
  ReadModeChoice c;
  if (!direct_ok) {
    c.reason = why + "; the filesystem refuses O_DIRECT on the pool's marker";
    return c;
  }
  const std::string remote = RemoteKind(root);
  c.direct = remote.empty();
  c.reason = why + (c.direct ? "; a local filesystem that accepts O_DIRECT on the pool's marker: O_DIRECT"
                             : "; on " + remote + " O_DIRECT reads are synchronous requests: buffered");
  return c;
}

ReadModeChoice Probe(ChunkDir& pool, const ReadProbeOptions& o, bool direct_ok) {
  FileSystem& fs = pool.fs();
  RemoveStaleProbes(fs);
  ProbeFile file(fs);
  if (Status w = file.Write(); !w.ok()) {
    return Fallback(direct_ok, "auto: probe not written (" + w.ToString() + ")", pool.root());
  }
  ReaderOptions ro{.max_inflight_bytes = o.inflight_bytes, .direct_io = false, .use_io_uring = o.io_uring,
                   .verify_threads = o.verify_threads};
  auto buffered = ChunkReader::Create(ro);
  ro.direct_io = true;
  auto direct = ChunkReader::Create(ro);
  std::vector<std::byte> out(kProbeBytes);
  Timing t[2];  // [0] buffered, [1] O_DIRECT
  const auto deadline = Clock::now() + kProbeDeadline;
  for (int round = 0; round < kProbeRounds; ++round) {
    for (int d = 0; d < 2; ++d) {
      if (!t[d].failure.ok() || (d == 1 && !direct_ok)) continue;
      file.DropCache();
      auto s = file.TimedRead(d == 1 ? *direct : *buffered, out);
      if (!s.ok()) {
        t[d].failure = s.status();
      } else if (t[d].best_s == 0 || *s < t[d].best_s) {
        t[d].best_s = std::max(*s, 1e-9);
      }
    }
    if (Clock::now() > deadline && t[0].best_s > 0 && (t[1].best_s > 0 || !direct_ok)) break;
  }
  ReadModeChoice c;
  if (t[0].best_s > 0) c.buffered_gbps = kProbeBytes / t[0].best_s / 1e9;
  if (t[1].best_s > 0) c.direct_gbps = kProbeBytes / t[1].best_s / 1e9;
  const std::string figures = "auto: probe of " + FormatBytes(kProbeBytes) + " read from storage, best of " +
                              std::to_string(kProbeRounds) + ": O_DIRECT " +
                              (direct_ok ? (c.direct_gbps > 0 ? Gbps(c.direct_gbps) : "failed") : "refused") +
                              ", buffered " + (c.buffered_gbps > 0 ? Gbps(c.buffered_gbps) : "failed");
  if (!direct_ok || c.direct_gbps == 0) {
    c.direct = false;
    c.reason = figures + (direct_ok ? " (" + t[1].failure.ToString() + ")" : "");
  } else if (c.buffered_gbps == 0) {
    c.direct = true;
    c.reason = figures + " (" + t[0].failure.ToString() + ")";
  } else {
    c.direct = KeepDirect(c.direct_gbps, c.buffered_gbps);
    char ratio[64];
    std::snprintf(ratio, sizeof(ratio), "; O_DIRECT/buffered %.2f %s %.2f", c.direct_gbps / c.buffered_gbps,
                  c.direct ? ">=" : "<", kKeepDirectRatio);
    c.reason = figures + ratio;
  }
  return c;
}

}  // namespace

Result<FsDirectMode> ParseFsDirectMode(std::string_view v) {
  if (v == "auto") return FsDirectMode::kAuto;
  if (v == "on" || v == "true" || v == "1" || v == "yes" || v.empty()) return FsDirectMode::kOn;
  if (v == "off" || v == "false" || v == "0" || v == "no") return FsDirectMode::kOff;
  return Status::InvalidArgument("option direct wants auto, on or off, got '" + std::string(v) + "'");
}

bool KeepDirect(double direct_gbps, double buffered_gbps) {
  return direct_gbps >= kKeepDirectRatio * buffered_gbps;
}

std::string DescribeReadMode(const ReadModeChoice& c) {
  return std::string(c.direct ? "O_DIRECT" : "buffered") + " (" + c.reason + ")";
}

ReadModeChoice ChooseReadMode(ChunkDir& pool, const ReadProbeOptions& o) {
  if (o.mode == FsDirectMode::kOff) return ReadModeChoice{.direct = false, .reason = "direct=off"};
  // Many network filesystems refuse O_DIRECT at open, and some accept it there but fail the reads.
  const bool direct_ok = pool.ProbeDirectIo();
  if (o.mode == FsDirectMode::kOn) {
    return ReadModeChoice{.direct = direct_ok,
                          .reason = direct_ok ? "direct=on" : "direct=on, but the filesystem refuses O_DIRECT"};
  }
  uint64_t dev = 0;
  const bool cacheable = o.use_cache && DeviceOf(pool.root(), &dev);
  if (cacheable) {
    MutexLock lock(Cache().mu);
    auto it = Cache().by_device.find(dev);
    if (it != Cache().by_device.end()) {
      ReadModeChoice c = it->second;
      c.reason += " (this process's earlier probe of the same mount)";
      return c;
    }
  }
  if (o.read_only) return Fallback(direct_ok, "auto, read-only open: not timed (a probe writes a file)", pool.root());
  if (!o.timed) return Fallback(direct_ok, "auto: not timed (a filesystem given by the caller)", pool.root());
  if (!direct_ok) {
    return ReadModeChoice{.direct = false, .reason = "auto: the filesystem refuses O_DIRECT on the pool's marker"};
  }
  ReadModeChoice c = Probe(pool, o, direct_ok);
  if (cacheable && (c.direct_gbps > 0 || c.buffered_gbps > 0)) {
    MutexLock lock(Cache().mu);
    Cache().by_device.emplace(dev, c);
  }
  return c;
}

}  // namespace kvtier::internal
