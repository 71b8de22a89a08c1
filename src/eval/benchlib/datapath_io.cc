#include "eval/benchlib/datapath_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/chunk_format.h"
#include "core/latency.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace fs = std::filesystem;

namespace {

// Reads the whole file into `buf` (sized to the file); short reads are continued.
Status ReadWhole(const std::string& path, std::vector<std::byte>* buf) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  buf->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < buf->size()) {
    const ssize_t n = pread(fd, buf->data() + done, buf->size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      return Status::FromErrno(err, "pread " + path);
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return Status::OK();
}

}  // namespace

Result<uint64_t> FreeBytesAt(const std::string& path) {
  fs::path p = path.empty() ? fs::path(".") : fs::path(path);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs st {};
  if (statvfs(p.c_str(), &st) != 0) return Status::FromErrno(errno, "statvfs " + p.string());
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Status CheckEnoughSpace(const std::string& what, uint64_t free_bytes, uint64_t need_bytes,
                        const std::string& breakdown) {
  if (free_bytes >= need_bytes) return Status::OK();
  return Status::NoSpace(what + " has " + FormatBytes(free_bytes) + " free, but the bench needs " +
                         FormatBytes(need_bytes) + " (" + breakdown +
                         "); lower --total or point --target elsewhere");
}

Result<uint64_t> AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == "MemAvailable:") return kib * 1024;
  }
  return Status::IOError("no MemAvailable in /proc/meminfo");
}

Result<uint64_t> DropPageCache(const std::string& dir) {
  uint64_t files = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // raced with a removal: nothing to drop
    // Dirty pages are not dropped by DONTNEED: write them back first.
    if (fdatasync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
      const int err = errno;
      close(fd);
      return Status::FromErrno(err, "drop page cache of " + it->path().string());
    }
    close(fd);
    ++files;
  }
  if (ec) return Status::FromErrno(ec.value(), "walk " + dir);
  return files;
}

std::vector<std::string> FilesOfSize(const std::string& dir, uint64_t size) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2) && it->file_size(ec2) == size) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<PhaseResult> SerialPread(const std::vector<std::string>& files, uint64_t payload_bytes) {
  LatencyHistogram latency;
  PhaseResult r;
  std::vector<std::byte> buf;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& path : files) {
    const auto c0 = std::chrono::steady_clock::now();
    KVTIER_RETURN_IF_ERROR(ReadWhole(path, &buf));
    latency.Record(SecondsSince(c0) * 1e6);
    ++r.chunks;
    r.bytes += payload_bytes;
  }
  r.seconds = SecondsSince(t0);
  r.SetLatency(latency.Summary());
  return r;
}

PhaseResult MemcpyReference(std::span<std::byte> dst, std::span<const std::byte> src,
                            uint64_t chunk_bytes, bool checksum) {
  LatencyHistogram latency;
  PhaseResult r;
  volatile uint64_t sink = 0;  // the checksum must not be optimised away
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t at = 0; at + chunk_bytes <= dst.size(); at += chunk_bytes) {
    const auto c0 = std::chrono::steady_clock::now();
    const size_t n = std::min<size_t>(chunk_bytes, src.size());
    if (checksum) sink = sink ^ PayloadChecksum(src.first(n));
    std::memcpy(dst.data() + at, src.data(), n);
    latency.Record(SecondsSince(c0) * 1e6);
    ++r.chunks;
    r.bytes += chunk_bytes;
  }
  r.seconds = SecondsSince(t0);
  r.SetLatency(latency.Summary());
  return r;
}

std::string GbpsText(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB/s", bytes_per_second / 1e9);
  return buf;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kvtier::internal
