#include "tools/serve/http_server.h"

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/input_file.h"
#include "core/threads.h"
#include "tools/serve/http_router.h"
#include "tools/serve/http_session.h"

namespace kvtier::tools {

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// File descriptors kept free beside the connections: the listening socket, the tiers, logs.
constexpr rlim_t kSpareFds = 64;

struct TlsMaterial {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  ~TlsMaterial() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

Status LoadTls(const HttpOptions& o, TlsMaterial* tls) {
  KVTIER_ASSIGN_OR_RETURN(std::string cert,
                          ::kvtier::internal::ReadBoundedFile(o.tls_cert, 1 << 20, "TLS certificate"));
  KVTIER_ASSIGN_OR_RETURN(std::string key, ::kvtier::internal::ReadSecretFile(o.tls_key, "TLS key"));
  BIO* cb = BIO_new_mem_buf(cert.data(), static_cast<int>(cert.size()));
  tls->cert = cb != nullptr ? PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cb);
  BIO* kb = BIO_new_mem_buf(key.data(), static_cast<int>(key.size()));
  tls->key = kb != nullptr ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(kb);
  OPENSSL_cleanse(key.data(), key.size());
  if (tls->cert == nullptr) return Status::InvalidArgument("--tls-cert " + o.tls_cert + " holds no PEM certificate");
  if (tls->key == nullptr) return Status::InvalidArgument("--tls-key " + o.tls_key + " holds no PEM private key");
  return Status::OK();
}

// A TLS 1.2+ server context holding the certificate and key (it keeps its own references).
Status MakeTlsContext(const HttpOptions& o, std::optional<net::ssl::context>* ctx) {
  TlsMaterial tls;
  KVTIER_RETURN_IF_ERROR(LoadTls(o, &tls));
  ctx->emplace(net::ssl::context::tls_server);
  (*ctx)->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1);
  SSL_CTX* native = (*ctx)->native_handle();
  if (SSL_CTX_use_certificate(native, tls.cert) != 1 || SSL_CTX_use_PrivateKey(native, tls.key) != 1 ||
      SSL_CTX_check_private_key(native) != 1) {
    return Status::InvalidArgument("the TLS certificate and key do not make a TLS context");
  }
  return Status::OK();
}

// Room for max_connections open sockets: the soft RLIMIT_NOFILE is raised toward the hard one.
Status ReserveDescriptors(unsigned max_connections) {
  const rlim_t need = static_cast<rlim_t>(max_connections) + kSpareFds;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::IOError("cannot read RLIMIT_NOFILE");
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < need) {
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need) {
      return Status::InvalidArgument("--max-connections " + std::to_string(max_connections) + " needs " +
                                     std::to_string(need) + " file descriptors; RLIMIT_NOFILE allows " +
                                     std::to_string(lim.rlim_max));
    }
    lim.rlim_cur = need;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::IOError("cannot raise RLIMIT_NOFILE");
  }
  return Status::OK();
}

// Past max_connections: a short 503 if the socket takes it at once (plain HTTP), then close. Never
// queued: the client learns at once, and the open connections keep their room.
void RefuseBusy(tcp::socket& socket, bool tls) {
  static constexpr std::string_view kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
      "Retry-After: 1\r\nContent-Length: 54\r\n\r\n{\"error\":\"too many connections: try again shortly\"}\n";
  if (!tls) (void)::send(socket.native_handle(), kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ec;
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

}  // namespace

struct HttpServer::Impl {
  Impl(const HttpOptions& o, const ServeApi& api) : options(o), router(api, o.token), shared(options, router, io) {}

  void Accept();
  void OnAccepted(const boost::system::error_code& ec, tcp::socket socket);
  void StopOnLoop();

  const HttpOptions options;
  HttpRouter router;
  std::optional<net::ssl::context> tls;
  std::vector<std::thread> worker_threads;
  // Destroyed in reverse: the workers' leftover jobs first (they hold work on `io`), then `io` with any
  // leftover session, then what sessions use (shared, tls).
  internal::SessionShared shared;
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer retry{io};
  net::io_context workers{1};
  bool listening = false;
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    OnAccepted(ec, std::move(socket));
  });
}

void HttpServer::Impl::OnAccepted(const boost::system::error_code& ec, tcp::socket socket) {
  if (shared.stopping.load() || !acceptor.is_open()) return;
  if (ec) {
    // Out of descriptors or memory for a moment: try again shortly rather than spin.
    retry.expires_after(std::chrono::milliseconds(100));
    retry.async_wait([this](const boost::system::error_code& e) {
      if (!e) Accept();
    });
    return;
  }
  if (shared.registry.size() >= options.max_connections) {
    RefuseBusy(socket, tls.has_value());
  } else {
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (tls) {
      internal::StartTlsSession(std::move(socket), *tls, shared);
    } else {
      internal::StartSession(std::move(socket), shared);
    }
  }
  Accept();
}

void HttpServer::Impl::StopOnLoop() {
  shared.stopping.store(true);
  boost::system::error_code ec;
  acceptor.close(ec);
  retry.cancel();
  shared.registry.StopAll();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Make(const HttpOptions& options, const ServeApi& api) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  if (options.max_connections == 0 || options.max_header_bytes < 1024 || options.max_header_fields == 0 ||
      options.idle_timeout_s <= 0 || options.request_timeout_s <= 0 || options.io_timeout_s <= 0) {
    return Status::InvalidArgument("HTTP limits must be positive (and the head at least 1024 bytes)");
  }
  auto impl = std::make_unique<Impl>(options, api);
  if (!options.tls_cert.empty()) KVTIER_RETURN_IF_ERROR(MakeTlsContext(options, &impl->tls));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

Result<int> HttpServer::Bind() {
  Impl& s = *impl_;
  KVTIER_RETURN_IF_ERROR(ReserveDescriptors(s.options.max_connections));
  const std::string where = s.options.host + ":" + std::to_string(s.options.port);
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  const auto found = resolver.resolve(s.options.host, std::to_string(s.options.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) return Status::IOError("cannot listen on " + where + " (not an address of this host)");
  const tcp::endpoint endpoint = found.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    s.acceptor.close(ec);
    return Status::IOError("cannot listen on " + where + " (in use, or not an address of this host)");
  }
  s.listening = true;
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

Status HttpServer::Run() {
  Impl& s = *impl_;
  if (!s.listening) return Status::IOError("serving needs Bind first");
  // Requests that touch the Store run on these; where the OS refused every one, on the reading thread.
  auto guard = net::make_work_guard(s.workers);
  (void)::kvtier::internal::StartThreads(&s.worker_threads, s.options.threads, [&s] { s.workers.run(); },
                                         "kvtier serve's requests");
  if (!s.worker_threads.empty()) s.shared.workers = &s.workers;
  s.Accept();
  Status status = Status::OK();
  try {
    s.io.run();  // returns once Stop closed the listener and every connection has closed
  } catch (const std::exception& e) {
    status = Status::IOError(std::string("serving stopped: ") + e.what());
  }
  guard.reset();
  for (auto& t : s.worker_threads) t.join();
  s.worker_threads.clear();
  return status;
}

void HttpServer::Stop() {
  net::post(impl_->io, [s = impl_.get()] { s->StopOnLoop(); });
}

}  // namespace kvtier::tools
