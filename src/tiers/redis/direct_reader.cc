#include "tiers/redis/direct_reader.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <vector>

namespace kvtier::redis {
namespace {

Status ReadError(ssize_t r) {
  if (r == 0) return Status::IOError("connection closed by the server", /*retryable=*/true);
  if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::IOError("read timed out", true);
  return Status::IOError(std::string("read: ") + std::strerror(errno), true);
}

Status Malformed(std::string_view what) {
  return Status::IOError("malformed reply: " + std::string(what), /*retryable=*/true);
}

// Moves the front of `iov[*k]` on by `n` bytes, stepping to the next entry when it is used up.
void Advance(std::vector<iovec>& iov, size_t* k, size_t n) {
  iov[*k].iov_base = static_cast<char*>(iov[*k].iov_base) + n;
  iov[*k].iov_len -= n;
  if (iov[*k].iov_len == 0) ++*k;
}

}  // namespace

DirectReader::DirectReader() : buf_(std::make_unique_for_overwrite<char[]>(kBufferBytes)) {}

Status DirectReader::Fill(int fd) {
  if (pos_ == end_) pos_ = end_ = 0;
  if (end_ == kBufferBytes) {
    if (pos_ == 0) return Malformed("a line longer than " + std::to_string(kBufferBytes) + " bytes");
    std::memmove(buf_.get(), buf_.get() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  for (;;) {
    const ssize_t r = ::read(fd, buf_.get() + end_, kBufferBytes - end_);
    if (r > 0) {
      end_ += static_cast<size_t>(r);
      return Status::OK();
    }
    if (r < 0 && errno == EINTR) continue;
    return ReadError(r);
  }
}

Result<std::string_view> DirectReader::Line(int fd) {
  // Fill keeps the unread bytes in order, so the part already searched stays searched.
  for (size_t searched = 0;;) {
    const char* begin = buf_.get() + pos_;
    const size_t avail = end_ - pos_;
    const void* nl = std::memchr(begin + searched, '\n', avail - searched);
    if (nl != nullptr) {
      const size_t n = static_cast<size_t>(static_cast<const char*>(nl) - begin);
      if (n == 0 || begin[n - 1] != '\r') return Malformed("a line not ended by CRLF");
      pos_ += n + 1;
      return std::string_view(begin, n - 1);
    }
    searched = avail;
    KVTIER_RETURN_IF_ERROR(Fill(fd));
  }
}

Status DirectReader::Crlf(int fd) {
  while (end_ - pos_ < 2) KVTIER_RETURN_IF_ERROR(Fill(fd));
  if (buf_[pos_] != '\r' || buf_[pos_ + 1] != '\n') return Malformed("a bulk string not ended by CRLF");
  pos_ += 2;
  return Status::OK();
}

Status DirectReader::Drop(int fd, uint64_t len) {
  while (len > 0) {
    if (pos_ == end_) KVTIER_RETURN_IF_ERROR(Fill(fd));
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, end_ - pos_));
    pos_ += n;
    len -= n;
  }
  return Crlf(fd);
}

Status DirectReader::Bulk(int fd, uint64_t len, std::span<std::byte> head, ScatterList rest, bool* wrote) {
  // The destination's first `len` bytes as a list of pieces.
  std::vector<iovec> iov;
  uint64_t need = len;
  auto add = [&](std::span<std::byte> p) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(p.size(), need));
    if (n > 0) iov.push_back(iovec{p.data(), n});
    need -= n;
  };
  add(head);
  for (const auto& p : rest) add(p);
  size_t k = 0;
  // What is buffered already goes first ...
  while (k < iov.size() && pos_ < end_) {
    const size_t n = std::min(iov[k].iov_len, end_ - pos_);
    std::memcpy(iov[k].iov_base, buf_.get() + pos_, n);
    pos_ += n;
    if (wrote != nullptr) *wrote = true;
    Advance(iov, &k, n);
  }
  // ... the rest straight from the socket into the destination; what follows the string (its CRLF,
  // the next reply) goes into the buffer, which is empty by now.
  std::vector<iovec> batch;
  while (k < iov.size()) {
    pos_ = end_ = 0;
    const size_t count = std::min<size_t>(iov.size() - k, IOV_MAX - 1);
    batch.assign(iov.begin() + static_cast<ptrdiff_t>(k), iov.begin() + static_cast<ptrdiff_t>(k + count));
    if (k + count == iov.size()) batch.push_back(iovec{buf_.get(), kBufferBytes});
    const ssize_t r = ::readv(fd, batch.data(), static_cast<int>(batch.size()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return ReadError(r);
    if (wrote != nullptr) *wrote = true;
    size_t got = static_cast<size_t>(r);
    while (got > 0 && k < iov.size()) {
      const size_t n = std::min(got, iov[k].iov_len);
      Advance(iov, &k, n);
      got -= n;
    }
    end_ = got;
  }
  return Crlf(fd);
}

Result<DirectReply> DirectReader::Next(int fd, std::span<std::byte> head, ScatterList rest, bool* wrote) {
  KVTIER_ASSIGN_OR_RETURN(std::string_view line, Line(fd));
  if (line.empty()) return Malformed("an empty line");
  DirectReply reply;
  const std::string_view body = line.substr(1);
  switch (line[0]) {
    case '-':
      reply.kind = DirectReply::Kind::kError;
      reply.text = body;
      return reply;
    case '+':
      reply.kind = DirectReply::Kind::kStatus;
      reply.text = body;
      return reply;
    case ':':
    case '$':
      break;
    default:
      return Malformed("unexpected type byte");
  }
  long long n = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), n);
  if (ec != std::errc() || end != body.data() + body.size()) return Malformed("a bad number");
  if (line[0] == ':') {
    reply.kind = DirectReply::Kind::kInteger;
    reply.integer = n;
    return reply;
  }
  if (n == -1) return reply;  // nil
  if (n < 0) return Malformed("a negative length");
  reply.kind = DirectReply::Kind::kBulk;
  reply.len = static_cast<uint64_t>(n);
  const uint64_t room = head.size() + TotalBytes(rest);
  if (reply.len > room) {
    KVTIER_RETURN_IF_ERROR(Drop(fd, reply.len));
    return reply;
  }
  KVTIER_RETURN_IF_ERROR(Bulk(fd, reply.len, head, rest, wrote));
  reply.landed = true;
  return reply;
}

}  // namespace kvtier::redis
