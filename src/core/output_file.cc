#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace kvtier::internal {
namespace {

// A name beside `path` nobody else uses: pid and a per-process counter; O_EXCL makes sure.
std::string TempBeside(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".kvtmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

Status WriteAll(int fd, std::string_view text, const std::string& where) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "write " + where);
    text.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

}  // namespace

Status WriteOutputFile(const std::string& path, std::string_view text, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(what + " " + path + " exists and is " +
                                   (S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file") +
                                   "; kvtier never writes through one (remove it or choose another name)");
  }
  for (int attempt = 0;; ++attempt) {
    const std::string temp = TempBeside(path);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && attempt < 8) continue;
    if (fd < 0) return Status::FromErrno(errno, "create " + what + " " + temp);
    Status s = WriteAll(fd, text, what + " " + temp);
    if (::close(fd) != 0 && s.ok()) s = Status::FromErrno(errno, "close " + what + " " + temp);
    if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
      s = Status::FromErrno(errno, "rename " + temp + " to " + path);
    }
    if (!s.ok()) ::unlink(temp.c_str());
    return s;
  }
}

}  // namespace kvtier::internal
