// The HTTP side of `kvtier serve`: an event-driven HTTP/1.1 server (Boost.Beast over Boost.Asio, one
// thread reading and writing every connection) serving a ServeApi, over TLS when given a certificate,
// with a bearer token when given one. Every connection is bounded (docs/serve.md, "Bounds"): the
// number open at once (past it: 503 and close), the request head's bytes and fields (431), the body
// (413; Transfer-Encoding 411 and Content-Encoding 415 refused from the head), the wait for a request
// (idle timeout) and the time a request may take to arrive once begun (a deadline, so a trickle is
// dropped: the minimum receive rate). /healthz is answered on the reading thread; requests that touch
// the Store run on a fixed pool of worker threads (core/threads.h), at most one per connection.
// Pipelined requests are answered one by one, in order.
//
// Thread-safety: Stop may be called from any thread; the rest from the thread that made the server.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvtier/status.h"
#include "tools/serve/serve_api.h"

namespace kvtier::tools {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 9400;                  // 0: the system picks one (Bind returns it)
  std::string tls_cert, tls_key;    // PEM files; both or neither
  std::string token;                // "" : no token asked; else every path but /healthz and /readyz
                                    // needs "Authorization: Bearer <token>"
  size_t max_body_bytes = 1 << 20;  // larger bodies: 413
  unsigned threads = 4;             // requests that touch the Store, answered at once
  unsigned max_connections = 512;   // open at once; one more is answered 503 and closed
  size_t max_header_bytes = 16384;  // request line and header fields together; past it: 431
  unsigned max_header_fields = 100;  // header lines; past it: 431
  int idle_timeout_s = 15;          // the wait for a request's first byte (a new or kept-alive connection)
  int request_timeout_s = 10;       // from a request's first byte to its last (and for a TLS handshake)
  int io_timeout_s = 10;            // a reply the client does not take within it: the connection is dropped
};

class HttpServer {
 public:
  // Loads the TLS certificate and key (the key through ReadSecretFile: owner-only, absolute path).
  // InvalidArgument for bad options or TLS material.
  static Result<std::unique_ptr<HttpServer>> Make(const HttpOptions& options, const ServeApi& api);
  ~HttpServer();

  // Binds the listening socket; returns the port. IOError when the address cannot be bound;
  // InvalidArgument when RLIMIT_NOFILE cannot hold max_connections.
  Result<int> Bind();
  // Serves until Stop: requests in progress are answered, idle connections closed. IOError when
  // serving could not start.
  Status Run();
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::tools
