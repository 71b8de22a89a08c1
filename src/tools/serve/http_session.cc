#include "tools/serve/http_session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace kvtier::tools::internal {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// After a reply that closes the connection, what the client still sends is read and dropped for this
// long (or this much) before the socket closes, so the reply is not lost to a reset.
constexpr std::chrono::seconds kDrainTime{2};
constexpr size_t kDrainBytes = 4 << 20;

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

bool IsHttpError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

template <class Stream>
class Session final : public SessionBase {
 public:
  template <class... A>
  explicit Session(SessionShared& shared, A&&... a)
      : shared_(shared), stream_(std::forward<A>(a)...), buffer_(shared.options.max_header_bytes + 4096) {}
  ~Session() override { shared_.registry.Remove(this); }

  void Start() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      Lowest().expires_after(std::chrono::seconds(Options().request_timeout_s));
      stream_.async_handshake(net::ssl::stream_base::server, [self = Self()](beast::error_code ec) {
        if (ec) return self->Close();
        self->WaitForRequest();
      });
    } else {
      WaitForRequest();
    }
  }

  void OnStop() override {
    if (waiting_) Close();
  }

 private:
  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  const HttpOptions& Options() const { return shared_.options; }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // The keep-alive wait: the idle timeout runs until the request's first byte (a pipelined request
  // already in the buffer starts at once).
  void WaitForRequest() {
    if (shared_.stopping.load()) return CloseGracefully();
    waiting_ = true;
    if (buffer_.size() > 0) return ReadHead();
    Lowest().expires_after(std::chrono::seconds(Options().idle_timeout_s));
    const size_t room = std::min<size_t>(buffer_.max_size() - buffer_.size(), 4096);
    stream_.async_read_some(buffer_.prepare(room), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();  // idle too long, the client left, or Stop
      self->buffer_.commit(n);
      self->ReadHead();
    });
  }

  // From the first byte, the head and the body must arrive within request_timeout_s: one deadline,
  // not reset by each byte, so a trickle is dropped however steady.
  void ReadHead() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(Options().max_header_bytes));
    parser_->body_limit(Options().max_body_bytes);
    Lowest().expires_after(std::chrono::seconds(Options().request_timeout_s));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = Self()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(const beast::error_code& ec) {
    if (ec) return Fail(ec);
    const auto& req = parser_->get();
    if (static_cast<size_t>(std::distance(req.begin(), req.end())) > Options().max_header_fields) {
      return Refuse(431, "the request has more than " + std::to_string(Options().max_header_fields) + " header fields");
    }
    // Bodies serve does not take are refused from the head, unread: a chunked body would escape the
    // length bound, a gzip body would inflate past it.
    if (req.find(http::field::transfer_encoding) != req.end()) {
      return Refuse(411, "Transfer-Encoding is not accepted: send the body with a Content-Length");
    }
    const auto ce = req.find(http::field::content_encoding);
    if (ce != req.end() && !beast::iequals(ce->value(), "identity")) {
      return Refuse(415, "Content-Encoding is not accepted: send the body uncompressed");
    }
    if (parser_->is_done()) return Dispatch();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                              [self = Self()](beast::error_code e, size_t) {
                                if (e) return self->Close();
                                self->ReadBody();
                              });
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->Fail(ec);
      self->Dispatch();
    });
  }

  void Fail(const beast::error_code& ec) {
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return Refuse(431, "the request head is larger than " + std::to_string(Options().max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) return Refuse(413, "the request body is too large");
    if (ec == http::error::bad_transfer_encoding) {
      return Refuse(411, "Transfer-Encoding is not accepted: send the body with a Content-Length");
    }
    if (IsHttpError(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return Refuse(400, "the request is not well-formed HTTP/1.1");
    }
    Close();  // the deadline passed, the client left, or Stop
  }

  HttpAsk Ask() const {
    const auto& req = request_;
    return HttpAsk{Sv(req.method_string()), Sv(req.target()), Sv(req[http::field::authorization]), req.body()};
  }

  void Dispatch() {
    waiting_ = false;
    request_ = parser_->release();
    parser_.reset();
    const HttpAsk ask = Ask();
    if (shared_.workers == nullptr || !HttpRouter::TouchesStore(ask)) return Reply(shared_.router.Answer(ask));
    net::post(*shared_.workers, [self = Self(), work = net::make_work_guard(shared_.io)]() mutable {
      HttpAnswer answer = self->shared_.router.Answer(self->Ask());
      net::io_context& io = self->shared_.io;
      net::post(io, [self = std::move(self), answer = std::move(answer), work = std::move(work)]() mutable {
        self->Reply(std::move(answer));
      });
    });
  }

  void Reply(HttpAnswer answer) {
    const bool keep = request_.keep_alive() && !shared_.stopping.load();
    Respond(answer.reply, request_.version(), keep, request_.method() == http::verb::head,
            answer.ask_for_token);
  }

  void Refuse(int status, const std::string& what) {
    waiting_ = false;
    Respond(ErrorReply(status, what), 11, false, false, false);
  }

  void Respond(const ServeReply& r, unsigned version, bool keep, bool head_only, bool ask_for_token) {
    response_ = {};
    response_.result(static_cast<unsigned>(r.status));
    response_.version(version);
    response_.set(http::field::content_type, r.content_type);
    if (ask_for_token) response_.set(http::field::www_authenticate, "Bearer");
    response_.body() = r.body;
    response_.keep_alive(keep);
    response_.prepare_payload();
    serializer_.emplace(response_);
    Lowest().expires_after(std::chrono::seconds(Options().io_timeout_s));
    auto done = [self = Self(), keep](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->serializer_.reset();
      if (!keep) return self->CloseGracefully();
      self->WaitForRequest();
    };
    if (head_only) {
      http::async_write_header(stream_, *serializer_, std::move(done));
    } else {
      http::async_write(stream_, *serializer_, std::move(done));
    }
  }

  void CloseGracefully() {
    waiting_ = false;
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    drain_.resize(4096);
    Lowest().expires_after(kDrainTime);
    Drain();
  }

  void Drain() {
    Lowest().async_read_some(net::buffer(drain_), [self = Self()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ >= kDrainBytes) return self->Close();
      self->Drain();
    });
  }

  void Close() {
    waiting_ = false;
    Lowest().close();
  }

  SessionShared& shared_;
  Stream stream_;
  beast::flat_buffer buffer_;  // bounded: a head larger than max_header_bytes is refused before it fills
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
  bool waiting_ = true;  // waiting for a request or reading one: Stop closes the connection
  std::string drain_;
  size_t drained_ = 0;
};

template <class Stream, class... A>
void Launch(SessionShared& shared, A&&... a) {
  auto session = std::make_shared<Session<Stream>>(shared, std::forward<A>(a)...);
  shared.registry.Add(session);
  session->Start();
}

}  // namespace

void SessionRegistry::StopAll() {
  std::vector<std::shared_ptr<SessionBase>> open;
  for (auto& [ptr, weak] : sessions_) {
    if (auto s = weak.lock()) open.push_back(std::move(s));
  }
  for (auto& s : open) s->OnStop();
}

void StartSession(tcp::socket socket, SessionShared& shared) {
  Launch<beast::tcp_stream>(shared, std::move(socket));
}

void StartTlsSession(tcp::socket socket, net::ssl::context& tls, SessionShared& shared) {
  Launch<TlsStream>(shared, std::move(socket), tls);
}

}  // namespace kvtier::tools::internal
