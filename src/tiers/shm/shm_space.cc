// CheckRoom and ReservePages (shm_space.h).
#include "tiers/shm/shm_space.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvtier/tier.h"

namespace kvtier::internal::shm {
namespace {

std::string TooBig(const std::string& dir, uint64_t bytes, uint64_t capacity, const std::string& what) {
  return "shm:// capacity=" + FormatBytes(capacity) + " needs " + FormatBytes(bytes) + " in " + dir + ", " + what +
         "; lower capacity= or give the filesystem more room (Docker: --shm-size)";
}

}  // namespace

Status CheckRoom(int fd, const std::string& dir, uint64_t bytes, uint64_t capacity) {
  struct statvfs vfs {};
  if (::fstatvfs(fd, &vfs) != 0) return Status::IOError("statvfs " + dir + ": " + std::strerror(errno));
  const uint64_t unit = vfs.f_frsize != 0 ? vfs.f_frsize : vfs.f_bsize;
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) > UINT64_MAX / unit ? UINT64_MAX : vfs.f_bavail * unit;
  if (bytes > avail) return Status::NoSpace(TooBig(dir, bytes, capacity, "which has " + FormatBytes(avail) + " free"));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && bytes / static_cast<uint64_t>(page) > static_cast<uint64_t>(pages)) {
    return Status::NoSpace(TooBig(dir, bytes, capacity,
                                  "more than this host's memory (" +
                                      FormatBytes(static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)) + ")"));
  }
  return Status::OK();
}

Status ReservePages(int fd, const std::string& dir, uint64_t bytes) {
  int r;
  do {
    r = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  } while (r != 0 && errno == EINTR);
  if (r == 0 || errno == EOPNOTSUPP || errno == ENOSYS) return Status::OK();
  if (errno == ENOSPC) {
    return Status::NoSpace("shm:// pool of " + FormatBytes(bytes) + " in " + dir +
                           ": the filesystem ran out while its pages were reserved; lower capacity= or free room");
  }
  return Status::IOError("reserve " + FormatBytes(bytes) + " for a shm:// pool in " + dir + ": " + std::strerror(errno));
}

}  // namespace kvtier::internal::shm
