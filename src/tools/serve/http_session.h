// One connection of `kvtier serve` (http_server.h): reads requests under the bounds of HttpOptions,
// answers them through an HttpRouter, and closes. Private to src/tools/serve.
//
// Thread-safety: everything here runs on the reading thread (the io_context of SessionShared::io),
// but for HttpRouter::Answer, which a session runs on a worker for requests that touch the Store.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "tools/serve/http_router.h"
#include "tools/serve/http_server.h"

namespace kvtier::tools::internal {

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  // Stop was asked: a connection waiting for a request (or reading one) is closed; one being answered
  // finishes its reply and then closes.
  virtual void OnStop() = 0;
};

// The open connections: their number is what max_connections bounds. Reading thread only.
class SessionRegistry {
 public:
  size_t size() const { return sessions_.size(); }
  void Add(const std::shared_ptr<SessionBase>& s) { sessions_[s.get()] = s; }
  void Remove(const SessionBase* s) { sessions_.erase(s); }
  void StopAll();

 private:
  std::unordered_map<const SessionBase*, std::weak_ptr<SessionBase>> sessions_;
};

// What every session shares; owned by the server, outlives every session.
struct SessionShared {
  SessionShared(const HttpOptions& o, const HttpRouter& r, boost::asio::io_context& i)
      : options(o), router(r), io(i) {}
  const HttpOptions& options;
  const HttpRouter& router;
  boost::asio::io_context& io;                    // the reading thread's
  boost::asio::io_context* workers = nullptr;     // nullptr: every request is answered on the reading thread
  std::atomic<bool> stopping{false};
  SessionRegistry registry;
};

// Starts serving an accepted connection (registered in shared.registry until it closes).
void StartSession(boost::asio::ip::tcp::socket socket, SessionShared& shared);
void StartTlsSession(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls, SessionShared& shared);

}  // namespace kvtier::tools::internal
