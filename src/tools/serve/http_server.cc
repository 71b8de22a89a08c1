#include "tools/serve/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/input_file.h"
#include "core/thread_annotations.h"
#include "core/threads.h"

namespace kvtier::tools {

namespace {

using internal::CondVar;
using internal::Mutex;
using internal::MutexLock;

// httplib's task queue, bounded: `threads` workers (core/threads.h) and at most `max_queued` accepted
// connections waiting; enqueue waits for room, so the accepting thread stops accepting meanwhile.
// Where the OS refused every worker, a connection is served on the accepting thread.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(unsigned threads, size_t max_queued) : max_queued_(max_queued) {
    (void)internal::StartThreads(&workers_, threads, [this] { Work(); }, "kvtier serve's connections");
  }
  ~BoundedTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override EXCLUDES(mu_) {
    if (workers_.empty()) {
      fn();
      return;
    }
    MutexLock lock(mu_);
    while (queue_.size() >= max_queued_) room_.Wait(mu_);
    queue_.push_back(std::move(fn));
    work_.NotifyOne();
  }

  void shutdown() override EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    work_.NotifyAll();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Work() EXCLUDES(mu_) {
    for (;;) {
      std::function<void()> fn;
      {
        MutexLock lock(mu_);
        while (queue_.empty() && !stop_) work_.Wait(mu_);
        if (queue_.empty()) return;  // stopping, and every accepted connection served (and closed)
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      room_.NotifyOne();
      fn();
    }
  }

  const size_t max_queued_;
  Mutex mu_;
  CondVar work_, room_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

void Reply(httplib::Response& res, const ServeReply& r) {
  res.status = r.status;
  res.set_content(r.body, r.content_type.c_str());
}

// True (with the reply set) for a body serve does not take: any Transfer-Encoding (serve's bodies are
// small JSON with a Content-Length, the one length httplib bounds before reading) and any
// Content-Encoding but identity (never inflated). The connection is closed after the reply.
bool RefuseBodyEncodings(const httplib::Request& req, httplib::Response& res) {
  int status = 0;
  const char* what = nullptr;
  if (req.has_header("Transfer-Encoding")) {
    status = 411;
    what = "Transfer-Encoding is not accepted: send the body with a Content-Length";
  } else if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity") {
    status = 415;
    what = "Content-Encoding is not accepted: send the body uncompressed";
  }
  if (what == nullptr) return false;
  Reply(res, ErrorReply(status, what));
  res.set_header("Connection", "close");
  return true;
}

bool SameToken(const std::string& given, const std::string& expected) {
  return given.size() == expected.size() && CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
}

struct TlsMaterial {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  ~TlsMaterial() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

Status LoadTls(const HttpOptions& o, TlsMaterial* tls) {
  KVTIER_ASSIGN_OR_RETURN(std::string cert, internal::ReadBoundedFile(o.tls_cert, 1 << 20, "TLS certificate"));
  KVTIER_ASSIGN_OR_RETURN(std::string key, internal::ReadSecretFile(o.tls_key, "TLS key"));
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

}  // namespace

HttpServer::HttpServer(const HttpOptions& options, const ServeApi& api) : options_(options), api_(api) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Make(const HttpOptions& options, const ServeApi& api) {
  std::unique_ptr<HttpServer> s(new HttpServer(options, api));
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  if (!options.tls_cert.empty()) {
    TlsMaterial tls;
    KVTIER_RETURN_IF_ERROR(LoadTls(options, &tls));
    auto ssl = std::make_unique<httplib::SSLServer>(tls.cert, tls.key);  // the context keeps its own references
    if (!ssl->is_valid()) return Status::InvalidArgument("the TLS certificate and key do not make a TLS context");
    s->server_ = std::move(ssl);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  s->Route();
  return s;
}

void HttpServer::Route() {
  httplib::Server& svr = *server_;
  const unsigned threads = options_.threads, queued = options_.queued;
  svr.new_task_queue = [threads, queued] { return new BoundedTaskQueue(threads, queued); };
  svr.set_payload_max_length(options_.max_body_bytes);
  svr.set_read_timeout(options_.io_timeout_s, 0);
  svr.set_write_timeout(options_.io_timeout_s, 0);
  svr.set_keep_alive_max_count(100);
  const std::string token = options_.token;
  svr.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    // Runs once the head is read, before any body byte: bodies serve does not need are refused unread
    // (a chunked body escaped the length limit, a gzip body inflated past it).
    if (RefuseBodyEncodings(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (token.empty() || req.path == "/healthz" || req.path == "/readyz") return httplib::Server::HandlerResponse::Unhandled;
    if (SameToken(req.get_header_value("Authorization"), "Bearer " + token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    Reply(res, ErrorReply(401, "a bearer token is required (Authorization: Bearer ...)"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const char* what = res.status == 404 ? "no such path (GET /metrics, /healthz, /readyz, /v1/namespaces; POST /v1/lookup)"
                       : res.status == 413 ? "the request body is too large"
                                           : "the request was refused";
    Reply(res, ErrorReply(res.status, what));
    return httplib::Server::HandlerResponse::Handled;
  }));
  const ServeApi& api = api_;
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    Reply(res, ServeReply{200, "{\"status\":\"ok\"}\n"});
  });
  svr.Get("/readyz", [&api](const httplib::Request&, httplib::Response& res) { Reply(res, api.Ready()); });
  svr.Get("/metrics", [&api](const httplib::Request&, httplib::Response& res) { Reply(res, api.Metrics()); });
  svr.Get("/v1/namespaces", [&api](const httplib::Request&, httplib::Response& res) { Reply(res, api.Namespaces()); });
  svr.Post("/v1/lookup", [&api](const httplib::Request& req, httplib::Response& res) {
    Reply(res, api.Lookup(req.body));
  });
}

Result<int> HttpServer::Bind() {
  if (options_.port == 0) {
    const int port = server_->bind_to_any_port(options_.host);
    if (port <= 0) return Status::IOError("cannot listen on " + options_.host + " (any port)");
    return port;
  }
  if (!server_->bind_to_port(options_.host, options_.port)) {
    return Status::IOError("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                           " (in use, or not an address of this host)");
  }
  return options_.port;
}

Status HttpServer::Run() {
  const bool ok = server_->listen_after_bind();
  if (!ok && !stopping_.load()) return Status::IOError("serving stopped on an error of the listening socket");
  return Status::OK();
}

void HttpServer::Stop() {
  stopping_.store(true);
  server_->stop();
}

}  // namespace kvtier::tools
