#include "tools/serve/http_router.h"

#include <openssl/crypto.h>

namespace kvtier::tools {

namespace {

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

bool SameToken(std::string_view given, const std::string& expected) {
  return given.size() == expected.size() && CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
}

bool IsGet(std::string_view method) { return method == "GET" || method == "HEAD"; }

}  // namespace

bool HttpRouter::TouchesStore(const HttpAsk& ask) {
  const std::string_view path = PathOf(ask.target);
  return path == "/readyz" || path == "/metrics" || path == "/v1/namespaces" || path == "/v1/lookup";
}

HttpAnswer HttpRouter::Answer(const HttpAsk& ask) const {
  const std::string_view path = PathOf(ask.target);
  if (!token_.empty() && path != "/healthz" && path != "/readyz" &&
      !SameToken(ask.authorization, "Bearer " + token_)) {
    return {ErrorReply(401, "a bearer token is required (Authorization: Bearer ...)"), true};
  }
  if (IsGet(ask.method)) {
    if (path == "/healthz") return {ServeReply{200, "{\"status\":\"ok\"}\n"}};
    if (path == "/readyz") return {api_.Ready()};
    if (path == "/metrics") return {api_.Metrics()};
    if (path == "/v1/namespaces") return {api_.Namespaces()};
  } else if (ask.method == "POST" && path == "/v1/lookup") {
    return {api_.Lookup(ask.body)};
  }
  return {ErrorReply(404, "no such path (GET /metrics, /healthz, /readyz, /v1/namespaces; POST /v1/lookup)")};
}

}  // namespace kvtier::tools
