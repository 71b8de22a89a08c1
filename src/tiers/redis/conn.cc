#include "tiers/redis/conn.h"

#include <hiredis/hiredis.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <sys/time.h>

#include "tiers/redis/bounded_reader.h"

namespace kvtier::redis {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

ReplyNode ToReplyNode(const redisReply* r) {
  ReplyNode n;
  using T = ReplyNode::Type;
  switch (r->type) {
    case REDIS_REPLY_STRING: n.type = T::kString; break;
    case REDIS_REPLY_STATUS: n.type = T::kStatus; break;
    case REDIS_REPLY_ERROR: n.type = T::kError; break;
    case REDIS_REPLY_INTEGER: n.type = T::kInteger; n.integer = r->integer; break;
    case REDIS_REPLY_ARRAY: n.type = T::kArray; break;
    default: n.type = T::kNil; break;
  }
  if (n.type == T::kString || n.type == T::kStatus || n.type == T::kError) n.str.assign(r->str, r->len);
  if (n.type == T::kArray) {
    n.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) n.elements.push_back(ToReplyNode(r->element[i]));
  }
  return n;
}

Result<std::unique_ptr<Conn>> Conn::Open(const NodeAddr& node, const ConnOptions& options) {
  redisContext* ctx = redisConnectWithTimeout(node.host.c_str(), node.port, ToTimeval(options.connect_timeout));
  if (ctx == nullptr) return Status::IOError("redis " + node.ToString() + ": out of memory", true);
  if (ctx->err != 0) {
    Status s = Status::IOError("redis " + node.ToString() + ": connect: " + ctx->errstr, true);
    redisFree(ctx);
    return s;
  }
  BoundReader(ctx->reader);
  std::unique_ptr<Conn> c(new Conn(node, ctx));
  if (redisSetTimeout(ctx, ToTimeval(options.timeout)) != REDIS_OK) return c->Fail("set timeout");
  if (!options.password.empty()) {
    std::vector<std::string_view> argv{"AUTH"};
    if (!options.user.empty()) argv.push_back(options.user);
    argv.push_back(options.password);
    KVTIER_ASSIGN_OR_RETURN(ReplyPtr r, c->Command(argv));
    if (r->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("redis " + node.ToString() + ": authentication failed: " +
                                     std::string(r->str, r->len) + " (check password_file= and user=)");
    }
  }
  if (options.readonly) {
    const std::string_view argv[] = {"READONLY"};
    KVTIER_ASSIGN_OR_RETURN(ReplyPtr r, c->Command(argv));
    if (r->type == REDIS_REPLY_ERROR) {
      return ErrorReplyStatus(std::string_view(r->str, r->len), node.ToString());
    }
  }
  return c;
}

Conn::~Conn() { redisFree(ctx_); }

Status Conn::Desynced() {
  broken_ = true;
  return Status::IOError("redis " + node_.ToString() + ": replies read two ways on one connection", true);
}

Status Conn::Fail(std::string_view what) {
  broken_ = true;
  std::string err = ctx_->err != 0 ? std::string(ctx_->errstr) : std::string("connection failed");
  return Status::IOError("redis " + node_.ToString() + ": " + std::string(what) + ": " + err, true);
}

Result<ReplyPtr> Conn::Command(std::span<const std::string_view> argv) {
  if (direct_.buffered() > 0) return Desynced();
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  void* r = redisCommandArgv(ctx_, static_cast<int>(args.size()), args.data(), lens.data());
  if (r == nullptr) return Fail(argv.empty() ? "command" : std::string(argv[0]));
  return ReplyPtr(static_cast<redisReply*>(r));
}

Status Conn::Write(std::span<const iovec> pieces) {
  std::vector<iovec> left(pieces.begin(), pieces.end());
  size_t first = 0;
  while (first < left.size()) {
    const int n = static_cast<int>(std::min<size_t>(left.size() - first, IOV_MAX));
    const ssize_t w = ::writev(ctx_->fd, &left[first], n);
    if (w < 0) {
      if (errno == EINTR) continue;
      broken_ = true;
      const bool timeout = errno == EAGAIN || errno == EWOULDBLOCK;
      return Status::IOError("redis " + node_.ToString() + ": write: " +
                                 (timeout ? std::string("timed out") : std::string(strerror(errno))),
                             true);
    }
    size_t done = static_cast<size_t>(w);
    while (first < left.size() && done >= left[first].iov_len) done -= left[first++].iov_len;
    if (first < left.size()) {
      left[first].iov_base = static_cast<char*>(left[first].iov_base) + done;
      left[first].iov_len -= done;
    }
  }
  return Status::OK();
}

Result<DirectReply> Conn::ReadDirect(std::span<std::byte> head, ScatterList rest, bool* wrote) {
  const redisReader* reader = ctx_->reader;
  if (reader != nullptr && reader->len > reader->pos) return Desynced();  // hiredis holds bytes of this stream
  auto reply = direct_.Next(ctx_->fd, head, rest, wrote);
  if (!reply.ok()) {
    broken_ = true;
    return Status::IOError("redis " + node_.ToString() + ": " + reply.status().message(), true);
  }
  return reply;
}

Result<ReplyPtr> Conn::ReadReply() {
  if (direct_.buffered() > 0) return Desynced();
  void* r = nullptr;
  if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr) return Fail("read");
  return ReplyPtr(static_cast<redisReply*>(r));
}

void RespWriter::Text(std::string s) {
  scratch_.push_back(std::make_unique<std::string>(std::move(s)));
  iov_.push_back(iovec{scratch_.back()->data(), scratch_.back()->size()});
}

void RespWriter::BeginCommand(size_t args) { Text("*" + std::to_string(args) + "\r\n"); }

void RespWriter::Arg(std::string_view a) {
  Text("$" + std::to_string(a.size()) + "\r\n" + std::string(a) + "\r\n");
}

void RespWriter::ArgPieces(std::span<const std::span<const std::byte>> pieces) {
  size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  Text("$" + std::to_string(total) + "\r\n");
  for (const auto& p : pieces) {
    if (!p.empty()) iov_.push_back(iovec{const_cast<std::byte*>(p.data()), p.size()});
  }
  Text("\r\n");
}

void RespWriter::Clear() {
  iov_.clear();
  scratch_.clear();
}

}  // namespace kvtier::redis
