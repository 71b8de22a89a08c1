// One connection to one Redis node over hiredis (blocking mode, connect and command timeouts), and the
// conversion of hiredis replies into ReplyNode. A Conn is used by one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/uio.h>
#include <vector>

#include "kvtier/status.h"
#include "tiers/redis/direct_reader.h"
#include "tiers/redis/router.h"

struct redisContext;
struct redisReply;

namespace kvtier::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

ReplyNode ToReplyNode(const redisReply* r);

struct ConnOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds timeout{10000};
  std::string user;      // ACL user; empty = default user
  std::string password;  // empty = no AUTH
  bool readonly = false; // send READONLY (reads from replicas, cluster mode only)
};

class Conn {
 public:
  // Connects, authenticates and (when asked) sends READONLY. Connection failures are retryable
  // IOErrors; an authentication failure is an InvalidArgument naming the problem.
  static Result<std::unique_ptr<Conn>> Open(const NodeAddr& node, const ConnOptions& options);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  const NodeAddr& node() const { return node_; }
  bool broken() const { return broken_; }

  // One command, its reply. A connection failure is a retryable IOError and breaks the connection.
  Result<ReplyPtr> Command(std::span<const std::string_view> argv);
  // Writes already formatted commands (RESP) straight to the socket, without copying them.
  Status Write(std::span<const iovec> pieces);
  // The next reply of a pipeline.
  Result<ReplyPtr> ReadReply();
  // The next reply of a pipeline read straight from the socket (DirectReader): a bulk string lands in
  // `head`, then `rest`. The replies of one pipeline are read either all this way or all by ReadReply.
  Result<DirectReply> ReadDirect(std::span<std::byte> head, ScatterList rest, bool* wrote);

 private:
  Conn(NodeAddr node, redisContext* ctx) : node_(std::move(node)), ctx_(ctx) {}
  Status Fail(std::string_view what);
  // The stream holds bytes one reader has not seen: it can no longer be trusted.
  Status Desynced();

  NodeAddr node_;
  redisContext* ctx_;
  DirectReader direct_;
  bool broken_ = false;
};

// RESP encoding of a command whose arguments are given as pieces (the caller keeps them alive until
// written): appends to `iov`, keeping the small header strings itself.
class RespWriter {
 public:
  void BeginCommand(size_t args);
  void Arg(std::string_view a);
  // One argument made of several pieces.
  void ArgPieces(std::span<const std::span<const std::byte>> pieces);
  std::vector<iovec>& iov() { return iov_; }
  void Clear();

 private:
  void Text(std::string s);
  std::vector<iovec> iov_;
  std::vector<std::unique_ptr<std::string>> scratch_;
};

}  // namespace kvtier::redis
