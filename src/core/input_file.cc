#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

constexpr size_t kReadBlock = 64 << 10;

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Status TooBig(const std::string& what, const std::string& path, uint64_t max_bytes) {
  return Status::InvalidArgument(what + " " + path + " is larger than the limit of " +
                                 FormatBytes(max_bytes));
}

// read(2) that retries on EINTR; -1 with errno set on failure.
ssize_t ReadSome(int fd, char* dst, size_t n);

}  // namespace

// Opens without blocking (a FIFO with no writer would block a plain open), never through a link, and
// accepts only a regular file no larger than `max_bytes`.
Result<int> OpenUserFile(const std::string& path, uint64_t max_bytes, const std::string& what, bool secret) {
  if (path.empty()) return Status::InvalidArgument(what + ": no path given");
  if (secret && path[0] != '/') {
    return Status::InvalidArgument(what + " must be an absolute path, got '" + path + "'");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
  if (fd < 0 && errno == ELOOP) {
    return Status::InvalidArgument(what + " " + path + " is a symbolic link; kvtier does not follow links "
                                   "(name the file itself)");
  }
  if (fd < 0) return Status::FromErrno(errno, "open " + what + " " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + what + " " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(what + " " + path + " is " + KindOf(st.st_mode) +
                                   "; kvtier reads only regular files");
  }
  if (secret && (st.st_mode & 077) != 0) {
    ::close(fd);
    return Status::InvalidArgument(what + " " + path + " is accessible by group or others (chmod 600 it)");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return TooBig(what, path, max_bytes);
  }
  return fd;
}

namespace {

Result<int> OpenRegular(const std::string& path, uint64_t max_bytes, const std::string& what) {
  return OpenUserFile(path, max_bytes, what, /*secret=*/false);
}

ssize_t ReadSome(int fd, char* dst, size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd, dst, n);
    if (got >= 0 || errno != EINTR) return got;
  }
}

}  // namespace

namespace {

// Reads all of an open file (closed here) of at most `max_bytes`: a file that grew past it after the
// size check is refused, never read further.
Result<std::string> ReadAllAndClose(int fd, const std::string& path, uint64_t max_bytes, const std::string& what) {
  std::string out;
  char block[kReadBlock];
  for (;;) {
    const ssize_t got = ReadSome(fd, block, sizeof(block));
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "read " + what + " " + path);
    }
    if (got == 0) break;
    if (out.size() + static_cast<size_t>(got) > max_bytes) {  // it grew after the size check
      ::close(fd);
      return TooBig(what, path, max_bytes);
    }
    out.append(block, static_cast<size_t>(got));
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes, const std::string& what) {
  KVTIER_ASSIGN_OR_RETURN(const int fd, OpenRegular(path, max_bytes, what));
  return ReadAllAndClose(fd, path, max_bytes, what);
}

Result<std::string> ReadSecretFile(const std::string& path, const std::string& what) {
  KVTIER_ASSIGN_OR_RETURN(const int fd, OpenUserFile(path, kMaxSecretFileBytes, what, /*secret=*/true));
  return ReadAllAndClose(fd, path, kMaxSecretFileBytes, what);
}

Result<LineReader> LineReader::Open(const std::string& path, uint64_t max_file_bytes,
                                    size_t max_line_bytes, const std::string& what) {
  KVTIER_ASSIGN_OR_RETURN(const int fd, OpenRegular(path, max_file_bytes, what));
  return LineReader(fd, path, max_file_bytes, max_line_bytes, what);
}

LineReader::LineReader(int fd, std::string path, uint64_t max_file_bytes, size_t max_line_bytes,
                       std::string what)
    : fd_(fd),
      path_(std::move(path)),
      what_(std::move(what)),
      max_file_bytes_(max_file_bytes),
      max_line_bytes_(max_line_bytes) {}

LineReader::LineReader(LineReader&& other) noexcept { *this = std::move(other); }

LineReader& LineReader::operator=(LineReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    max_file_bytes_ = other.max_file_bytes_;
    max_line_bytes_ = other.max_line_bytes_;
    total_read_ = other.total_read_;
    line_no_ = other.line_no_;
    buf_ = std::move(other.buf_);
    pos_ = other.pos_;
    eof_ = other.eof_;
  }
  return *this;
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status LineReader::Fill() {
  // Drop what was consumed, then append one block.
  buf_.erase(0, pos_);
  pos_ = 0;
  const size_t old = buf_.size();
  buf_.resize(old + kReadBlock);
  const ssize_t got = ReadSome(fd_, buf_.data() + old, kReadBlock);
  if (got < 0) {
    const int err = errno;
    buf_.resize(old);
    return Status::FromErrno(err, "read " + what_ + " " + path_);
  }
  buf_.resize(old + static_cast<size_t>(got));
  if (got == 0) eof_ = true;
  total_read_ += static_cast<uint64_t>(got);
  if (total_read_ > max_file_bytes_) return TooBig(what_, path_, max_file_bytes_);
  return Status::OK();
}

Result<bool> LineReader::Next(std::string* line) {
  if (fd_ < 0) return Status::InvalidArgument("read from a closed LineReader");
  size_t scanned = pos_;
  for (;;) {
    const size_t nl = buf_.find('\n', scanned);
    const size_t end = nl == std::string::npos ? buf_.size() : nl;
    if (end - pos_ > max_line_bytes_) {
      return Status::InvalidArgument(what_ + " " + path_ + ":" + std::to_string(line_no_ + 1) +
                                     ": line longer than the limit of " + FormatBytes(max_line_bytes_));
    }
    if (nl != std::string::npos || (eof_ && end > pos_)) {
      line->assign(buf_, pos_, end - pos_);
      pos_ = nl == std::string::npos ? end : nl + 1;
      ++line_no_;
      return true;
    }
    if (eof_) return false;
    scanned = buf_.size() - pos_;  // offsets move down by pos_ in Fill
    KVTIER_RETURN_IF_ERROR(Fill());
  }
}

}  // namespace kvtier::internal
