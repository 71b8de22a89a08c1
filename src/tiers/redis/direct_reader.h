// DirectReader: reads the RESP replies of a pipeline straight from a connection's socket, so that a
// bulk string (a GET's object) lands in the caller's buffers with one copy, the kernel's, instead of
// passing through hiredis' reader buffer and a reply object. Anything but a bulk string (errors such
// as MOVED/ASK, +OK, integers, nil) is returned as a small value.
//
// The socket's SO_RCVTIMEO (set by hiredis from the command timeout) bounds every read. Any failure
// (a timeout, a closed connection, a malformed reply) leaves the stream at an unknown position: the
// connection must not be used again. Used by one thread at a time, like its Conn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::redis {

struct DirectReply {
  enum class Kind { kBulk, kNil, kError, kStatus, kInteger } kind = Kind::kNil;
  uint64_t len = 0;       // kBulk: the string's length
  bool landed = false;    // kBulk: the string is in the destination (false: it did not fit, dropped)
  std::string text;       // kError, kStatus: the line without its type byte
  long long integer = 0;  // kInteger
};

class DirectReader {
 public:
  DirectReader();

  // Reads the next reply from `fd`. A bulk string of at most head.size() + TotalBytes(rest) bytes
  // lands in `head`, then in the pieces of `rest`; a longer one is read and dropped. `*wrote` (when
  // set) becomes true as soon as a byte lands in the destination, also when the read then fails.
  // IOError (retryable) on a timeout, a closed connection or a malformed reply.
  Result<DirectReply> Next(int fd, std::span<std::byte> head, ScatterList rest, bool* wrote);

  // Bytes received beyond the replies read so far (none in a healthy request/reply exchange).
  size_t buffered() const { return end_ - pos_; }

 private:
  Status Fill(int fd);                       // at least one more byte into the buffer
  Result<std::string_view> Line(int fd);     // the next line, without CRLF
  Status Bulk(int fd, uint64_t len, std::span<std::byte> head, ScatterList rest, bool* wrote);
  Status Drop(int fd, uint64_t len);         // reads and discards len bytes
  Status Crlf(int fd);

  static constexpr size_t kBufferBytes = 64 * 1024;
  std::unique_ptr<char[]> buf_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace kvtier::redis
