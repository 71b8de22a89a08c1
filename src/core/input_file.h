// Reading files named by users (bench results, request traces, fio's output): every such file is
// opened without blocking, must be a regular file (a FIFO, socket or device such as /dev/zero is
// refused before a byte is read), and is read under a bound on its size and, for line-oriented
// files, on the length of each line. Memory use is therefore bounded by the caller's limits whatever
// the file holds. Errors are one line naming the file.
//
// Symbolic links given by the user are followed (the user named the file); what they lead to must
// be a regular file. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::internal {

// Whole-file limit for the small JSON documents kvtier reads (bench results, fio output).
inline constexpr uint64_t kMaxJsonInputBytes = 64ull << 20;

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
