// The one opener of every file kvtier reads on a user's behalf: secrets (key_file=, redis
// password_file=, s3 credentials_file=, rados keyring=) and inputs (rados conf=, request traces, bench
// results, fio's output). Every such file is opened without blocking and without following a
// symbolic link (O_NOFOLLOW: a link is refused, never followed), must be a regular file (a FIFO,
// socket or device such as /dev/zero is refused before a byte is read), and is read under a bound on
// its size and, for line-oriented files, on the length of each line, so memory use is bounded by the
// caller's limits whatever the file holds. Secrets must also be named by an absolute path and be
// accessible by their owner only (no group or other permission bits). Errors are one line naming
// the file. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::internal {

// Whole-file limit for the small JSON documents kvtier reads (bench results, fio output).
inline constexpr uint64_t kMaxJsonInputBytes = 64ull << 20;
// Limit for secret files (passwords, credentials, keyrings).
inline constexpr uint64_t kMaxSecretFileBytes = 64ull << 10;

// The opener itself: a descriptor of the regular file at `path` (see above), no larger than
// `max_bytes`. `secret`: also an absolute path and owner-only permissions. InvalidArgument for a
// link, a non-regular file, a relative secret path, a group/other-accessible secret or a file over
// the bound; NotFound/IOError when it cannot be opened. The caller closes the descriptor.
Result<int> OpenUserFile(const std::string& path, uint64_t max_bytes, const std::string& what, bool secret);

// A whole secret file (OpenUserFile with secret = true, at most kMaxSecretFileBytes).
Result<std::string> ReadSecretFile(const std::string& path, const std::string& what);

// The whole file, at most `max_bytes` of it. InvalidArgument when it is not a regular file or is
// larger than `max_bytes` (also when it grows past it while being read); NotFound/IOError when it
// cannot be opened or read. `what` names the file's role in messages, e.g. "trace".
Result<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes,
                                    const std::string& what);

// Reads a file one line at a time ('\n' ends a line and is not returned; a last line without one is
// returned too), holding at most one line in memory.
class LineReader {
 public:
  // Opens `path` (see ReadBoundedFile for the checks). Lines longer than `max_line_bytes` and files
  // longer than `max_file_bytes` are InvalidArgument when reached.
  static Result<LineReader> Open(const std::string& path, uint64_t max_file_bytes,
                                 size_t max_line_bytes, const std::string& what);

  LineReader(LineReader&& other) noexcept;
  LineReader& operator=(LineReader&& other) noexcept;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // Fills `line` with the next line and returns true; false at the end of the file.
  Result<bool> Next(std::string* line);
  // 1-based number of the line last returned.
  size_t line_number() const { return line_no_; }

 private:
  LineReader(int fd, std::string path, uint64_t max_file_bytes, size_t max_line_bytes,
             std::string what);
  Status Fill();  // reads more bytes into buf_; sets eof_ at the end

  int fd_ = -1;
  std::string path_, what_;
  uint64_t max_file_bytes_ = 0;
  size_t max_line_bytes_ = 0;
  uint64_t total_read_ = 0;
  size_t line_no_ = 0;
  std::string buf_;
  size_t pos_ = 0;  // first unconsumed byte of buf_
  bool eof_ = false;
};

}  // namespace kvtier::internal
