// What `kvtier serve` answers to one parsed HTTP request, apart from the connection: the bearer token,
// the routes and the 404 of anything else. Free of the HTTP library, so the connection code
// (http_session.cc) only reads, bounds and writes.
//
// Thread-safety: Answer may be called from many threads at once (ServeApi's methods may).
#pragma once

#include <string>
#include <string_view>

#include "tools/serve/serve_api.h"

namespace kvtier::tools {

struct HttpAsk {
  std::string_view method;         // "GET", "HEAD", "POST", ...
  std::string_view target;         // as sent: path, maybe "?query"
  std::string_view authorization;  // the Authorization header, "" when absent
  std::string_view body;
};

struct HttpAnswer {
  ServeReply reply;
  bool ask_for_token = false;  // a 401: the reply carries "WWW-Authenticate: Bearer"
};

class HttpRouter {
 public:
  // `token` "": no token asked; else every path but /healthz and /readyz needs "Bearer <token>".
  HttpRouter(const ServeApi& api, std::string token) : api_(api), token_(std::move(token)) {}

  // True when answering `ask` may touch the Store's tiers (listing, lookups, metrics): the caller runs
  // it off the thread that reads requests, so /healthz is never queued behind tier I/O.
  static bool TouchesStore(const HttpAsk& ask);
  HttpAnswer Answer(const HttpAsk& ask) const;

 private:
  const ServeApi& api_;
  const std::string token_;
};

}  // namespace kvtier::tools
