#include "tools/serve/serve_api.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/engine_identity.h"
#include "kvtier/keys.h"
#include "kvtier/metrics.h"

namespace kvtier::tools {

namespace {

using nlohmann::json;

// A request refused: its status and message.
struct Refusal {
  int status;
  std::string message;
};

// One lookup of a batch, its keys computed or given.
struct LookupAsk {
  std::vector<ChunkKey> keys;
  bool from_tokens = false;
};

struct LookupBody {
  Digest ns{};
  uint32_t tokens_per_chunk = 0;
  std::vector<LookupAsk> asks;
};

std::optional<Refusal> CheckFields(const json& object, std::initializer_list<std::string_view> known,
                                   std::string_view what) {
  if (!object.is_object()) return Refusal{400, std::string(what) + " must be a JSON object"};
  for (const auto& [name, value] : object.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return Refusal{400, std::string(what) + " has an unknown field \"" + name + "\""};
    }
  }
  return std::nullopt;
}

std::optional<Refusal> ParseTokens(const json& tokens, const LookupBody& body, const ServeLimits& limits,
                                   LookupAsk* ask) {
  if (!tokens.is_array()) return Refusal{400, "\"tokens\" must be an array of token ids"};
  if (body.tokens_per_chunk == 0) return Refusal{400, "\"tokens\" needs \"tokens_per_chunk\""};
  if (tokens.size() / body.tokens_per_chunk > limits.max_keys) {
    return Refusal{413, "\"tokens\" makes more than " + std::to_string(limits.max_keys) + " chunks"};
  }
  std::vector<uint32_t> ids;
  ids.reserve(tokens.size());
  for (const json& t : tokens) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() > UINT32_MAX) {
      return Refusal{400, "a token id is not a whole number from 0 to 4294967295"};
    }
    ids.push_back(static_cast<uint32_t>(t.get<uint64_t>()));
  }
  ask->keys = ComputeChunkKeys(body.ns, body.tokens_per_chunk, ids);
  ask->from_tokens = true;
  return std::nullopt;
}

std::optional<Refusal> ParseKeys(const json& keys, const ServeLimits& limits, LookupAsk* ask) {
  if (!keys.is_array()) return Refusal{400, "\"keys\" must be an array of 64-hex-character chunk keys"};
  if (keys.size() > limits.max_keys) {
    return Refusal{413, "\"keys\" holds more than " + std::to_string(limits.max_keys) + " keys"};
  }
  for (const json& k : keys) {
    auto digest = k.is_string() ? DigestFromHex(k.get<std::string>()) : Result<Digest>(Status::InvalidArgument(""));
    if (!digest.ok()) return Refusal{400, "a chunk key is not 64 hex characters"};
    ask->keys.push_back(ChunkKey{*digest});
  }
  return std::nullopt;
}

std::optional<Refusal> ParseAsk(const json& r, const LookupBody& body, const ServeLimits& limits, LookupAsk* ask) {
  if (auto bad = CheckFields(r, {"tokens", "keys"}, "a request")) return bad;
  if (r.contains("tokens") == r.contains("keys")) {
    return Refusal{400, "a request holds either \"tokens\" or \"keys\""};
  }
  return r.contains("tokens") ? ParseTokens(r["tokens"], body, limits, ask) : ParseKeys(r["keys"], limits, ask);
}

std::optional<Refusal> ParseLookup(std::string_view text, const ServeLimits& limits, LookupBody* out) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Refusal{400, "the body is not JSON"};
  if (auto bad = CheckFields(doc, {"namespace", "tokens_per_chunk", "requests"}, "the body")) return bad;
  if (!doc.contains("namespace") || !doc["namespace"].is_string()) {
    return Refusal{400, "\"namespace\" (the namespace id, 64 hex characters) is missing"};
  }
  auto ns = DigestFromHex(doc["namespace"].get<std::string>());
  if (!ns.ok()) return Refusal{400, "\"namespace\" is not 64 hex characters"};
  out->ns = *ns;
  if (doc.contains("tokens_per_chunk")) {
    const json& tpc = doc["tokens_per_chunk"];
    if (!tpc.is_number_unsigned() || tpc.get<uint64_t>() == 0 || tpc.get<uint64_t>() > limits.max_tokens_per_chunk) {
      return Refusal{400, "\"tokens_per_chunk\" must be a whole number from 1 to " +
                              std::to_string(limits.max_tokens_per_chunk)};
    }
    out->tokens_per_chunk = static_cast<uint32_t>(tpc.get<uint64_t>());
  }
  if (!doc.contains("requests") || !doc["requests"].is_array() || doc["requests"].empty()) {
    return Refusal{400, "\"requests\" must be a non-empty array"};
  }
  if (doc["requests"].size() > limits.max_requests) {
    return Refusal{413, "more than " + std::to_string(limits.max_requests) + " requests in one batch"};
  }
  for (const json& r : doc["requests"]) {
    out->asks.emplace_back();
    if (auto bad = ParseAsk(r, *out, limits, &out->asks.back())) return bad;
  }
  return std::nullopt;
}

// Leading keys each tier holds, and the leading keys some tier holds (Store::Lookup's answer), asked a
// window at a time (8, 16, 32, ... keys) until neither can grow.
struct Prefixes {
  std::vector<size_t> per_tier;
  size_t any = 0;
};

Prefixes CountPrefixes(Store& store, const Digest& ns, std::span<const ChunkKey> keys) {
  const size_t tiers = store.tier_count();
  Prefixes p{std::vector<size_t>(tiers, 0), 0};
  std::vector<bool> counting(tiers, true);
  bool any_counting = true;
  for (size_t at = 0, window = 8; at < keys.size(); at += window, window *= 2) {
    const size_t n = std::min(window, keys.size() - at);
    std::vector<ChunkId> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(ChunkId{ns, keys[at + i], 0});
    std::vector<char> held_by_any(n, 0);
    bool asked = false;
    for (size_t t = 0; t < tiers; ++t) {
      if (!counting[t] && !any_counting) continue;
      asked = true;
      std::unique_ptr<bool[]> present(new bool[n]());
      store.tier(t).ContainsMany(ids, std::span<bool>(present.get(), n));
      for (size_t i = 0; i < n; ++i) held_by_any[i] |= present[i] ? 1 : 0;
      size_t lead = 0;
      while (lead < n && present[lead]) ++lead;
      if (counting[t]) {
        p.per_tier[t] += lead;
        counting[t] = lead == n;
      }
    }
    if (!asked) break;
    if (any_counting) {
      size_t lead = 0;
      while (lead < n && held_by_any[lead]) ++lead;
      p.any += lead;
      any_counting = lead == n;
    }
  }
  return p;
}

}  // namespace

ServeReply ErrorReply(int status, std::string_view message) {
  return ServeReply{status, json{{"error", message}}.dump() + "\n"};
}

ServeReply ServeApi::Lookup(std::string_view text) const {
  LookupBody body;
  if (auto bad = ParseLookup(text, limits_, &body)) return ErrorReply(bad->status, bad->message);
  json results = json::array();
  for (const LookupAsk& ask : body.asks) {
    const Prefixes p = CountPrefixes(store_, body.ns, ask.keys);
    json tiers = json::array();
    for (size_t t = 0; t < p.per_tier.size(); ++t) {
      tiers.push_back({{"tier", MetricsTierLabel(store_.tier(t).url())}, {"chunks", p.per_tier[t]}});
    }
    json r = {{"keys", ask.keys.size()}, {"chunks", p.any}, {"tokens", nullptr}, {"tiers", std::move(tiers)}};
    if (ask.from_tokens) r["tokens"] = uint64_t{p.any} * body.tokens_per_chunk;
    results.push_back(std::move(r));
  }
  return ServeReply{200, json{{"namespace", DigestHex(body.ns)}, {"results", std::move(results)}}.dump() + "\n"};
}

ServeReply ServeApi::Namespaces() const {
  json tiers = json::array();
  for (size_t t = 0; t < store_.tier_count(); ++t) {
    Tier& tier = store_.tier(t);
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_ns;  // hex -> chunks, bytes
    const Status s = tier.List([&](const ChunkInfo& info) {
      auto& [chunks, bytes] = by_ns[DigestHex(info.id.ns)];
      ++chunks;
      bytes += info.stored_bytes;
      return true;
    });
    if (!s.ok()) return ErrorReply(503, "listing " + MetricsTierLabel(tier.url()) + " failed: " + s.ToString());
    json spaces = json::array();
    for (const auto& [hex, totals] : by_ns) {
      json entry = {{"namespace", hex}, {"chunks", totals.first}, {"bytes", totals.second}};
      auto text = tier.NamespaceDescription(*DigestFromHex(hex));
      if (text.ok()) {
        if (auto id = EngineIdentity::Parse(*text); id.ok()) entry["identity"] = id->fields();
      }
      spaces.push_back(std::move(entry));
    }
    tiers.push_back({{"tier", MetricsTierLabel(tier.url())}, {"namespaces", std::move(spaces)}});
  }
  return ServeReply{200, json{{"tiers", std::move(tiers)}}.dump() + "\n"};
}

ServeReply ServeApi::Ready() const {
  for (size_t t = 0; t < store_.tier_count(); ++t) {
    Tier& tier = store_.tier(t);
    const Status s = tier.List([](const ChunkInfo&) { return false; });  // reachable: one entry is enough
    if (!s.ok()) return ErrorReply(503, MetricsTierLabel(tier.url()) + " does not answer: " + s.ToString());
  }
  return ServeReply{200, "{\"status\":\"ready\"}\n"};
}

ServeReply ServeApi::Metrics() const {
  return ServeReply{200, PrometheusText(store_.Stats()), "text/plain; version=0.0.4; charset=utf-8"};
}

}  // namespace kvtier::tools
