// What `kvtier serve` answers, apart from HTTP: the lookup of token ids or chunk keys against every tier
// of a Store, the namespaces its tiers hold, readiness and the metrics text. Each call returns an HTTP
// status and a body (JSON, or the Prometheus text); a request it refuses gets a 4xx status and
// {"error": "..."}, and changes nothing. The tiers are the Store's, opened read-only by the caller.
//
// Thread-safety: every method may be called from many threads at once (the Store and tiers are
// thread-safe; nothing here is shared but them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/store.h"

namespace kvtier::tools {

struct ServeLimits {
  uint32_t max_requests = 64;         // lookups in one POST /v1/lookup
  uint32_t max_keys = 16384;          // chunk keys (given or computed from tokens) in one lookup
  uint32_t max_tokens_per_chunk = 1u << 20;
};

struct ServeReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

class ServeApi {
 public:
  ServeApi(Store& store, ServeLimits limits) : store_(store), limits_(limits) {}

  // POST /v1/lookup. Body:
  //   {"namespace": "<64 hex>", "tokens_per_chunk": 256,
  //    "requests": [{"tokens": [1, 2, ...]}, {"keys": ["<64 hex>", ...]}]}
  // (tokens_per_chunk only with tokens.) Reply: {"namespace": ..., "results": [{"keys": K,
  //   "chunks": N, "tokens": N x tokens_per_chunk or null, "tiers": [{"tier": url, "chunks": n}, ...]}]}
  // where chunks is what Store::Lookup returns (leading keys some tier holds) and each tier's
  // chunks the leading keys that tier holds itself.
  ServeReply Lookup(std::string_view body) const;
  // GET /v1/namespaces: per tier, each namespace's chunks and bytes (and the engine identity where the
  // tier keeps one), as `kvtier inspect --json` shows them.
  ServeReply Namespaces() const;
  // GET /readyz: 200 when every tier answers a listing, 503 naming the one that does not.
  ServeReply Ready() const;
  // GET /metrics: the Prometheus text of the Store's statistics (docs/metrics.md).
  ServeReply Metrics() const;

 private:
  Store& store_;
  const ServeLimits limits_;
};

// {"error": message} with `status`.
ServeReply ErrorReply(int status, std::string_view message);

}  // namespace kvtier::tools
