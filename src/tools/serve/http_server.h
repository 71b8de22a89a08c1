// The HTTP side of `kvtier serve`: cpp-httplib serving a ServeApi, over TLS when given a certificate,
// with a bearer token when given one, a bounded request body and a bounded number of connections
// served at once (a fixed pool of worker threads started through core/threads.h, and a bounded queue
// of accepted connections: past it the accepting thread waits, and the kernel's backlog holds the rest).
//
// Thread-safety: Stop may be called from any thread; the rest from the thread that made the server.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "kvtier/status.h"
#include "tools/serve/serve_api.h"

namespace httplib {
class Server;
}

namespace kvtier::tools {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 9400;                  // 0: the system picks one (Bind returns it)
  std::string tls_cert, tls_key;    // PEM files; both or neither
  std::string token;                // "" : no token asked; else every path but /healthz and /readyz
                                    // needs "Authorization: Bearer <token>"
  size_t max_body_bytes = 1 << 20;  // larger bodies: 413
  unsigned threads = 4;             // connections served at once
  unsigned queued = 64;             // accepted connections waiting for a thread
  int io_timeout_s = 10;            // a client that stalls a read or a write longer is dropped
};

class HttpServer {
 public:
  // Loads the TLS certificate and key (the key through ReadSecretFile: owner-only, absolute path).
  static Result<std::unique_ptr<HttpServer>> Make(const HttpOptions& options, const ServeApi& api);
  ~HttpServer();

  // Binds the listening socket; returns the port. IOError when the address cannot be bound.
  Result<int> Bind();
  // Serves until Stop. IOError when serving could not start.
  Status Run();
  void Stop();

 private:
  HttpServer(const HttpOptions& options, const ServeApi& api);
  void Route();

  const HttpOptions options_;
  const ServeApi& api_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> stopping_{false};
};

}  // namespace kvtier::tools
