// The options of redis:// URLs (redis_client.h): nodes, password file, replica reads, TTL, connections.
#include <cctype>
#include <charconv>
#include <fstream>
#include <string>

#include "tiers/redis/redis_client.h"

#include "core/input_file.h"

namespace kvtier::redis {
namespace {

Result<std::string> ReadPassword(const std::string& path) {
  // The one opener of secrets: absolute, no link, regular, bounded, owner-only (core/input_file.h).
  auto text = internal::ReadSecretFile(path, "redis: password_file");
  if (!text.ok()) return Status::InvalidArgument(text.status().message());
  std::string line = text->substr(0, text->find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  if (line.empty()) return Status::InvalidArgument("redis: password_file " + path + " is empty");
  return line;
}

}  // namespace

Result<std::chrono::milliseconds> ParseMillis(std::string_view text) {
  uint64_t scale = 1;
  std::string_view digits = text;
  if (digits.ends_with("ms")) {
    digits.remove_suffix(2);
  } else if (digits.ends_with("s")) {
    digits.remove_suffix(1);
    scale = 1000;
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v > 86'400'000'000ULL / scale) {
    return Status::InvalidArgument("bad duration '" + std::string(text) + "' (e.g. 1500ms, 2s)");
  }
  return std::chrono::milliseconds(v * scale);
}

Result<RedisOptions> ParseRedisOptions(const TierUrl& url) {
  RedisOptions o;
  if (url.params.contains("password") || url.path.find('@') != std::string::npos) {
    return Status::InvalidArgument("redis:// never takes a password in the URL: use password_file=");
  }
  KVTIER_ASSIGN_OR_RETURN(o.seeds, ParseNodeList(url.path));
  auto get = [&](const char* name) -> const std::string* {
    auto it = url.params.find(name);
    return it == url.params.end() ? nullptr : &it->second;
  };
  if (const auto* f = get("password_file")) {
    KVTIER_ASSIGN_OR_RETURN(o.password, ReadPassword(*f));
  }
  if (const auto* u = get("user")) o.user = *u;
  if (!o.user.empty() && o.password.empty()) {
    return Status::InvalidArgument("redis: user= needs password_file=");
  }
  KVTIER_ASSIGN_OR_RETURN(o.replica_reads, url.GetBool("replica_reads", false));
  if (const auto* t = get("ttl")) {
    // A bare number read as milliseconds here and as seconds in every other duration: refused, so no
    // configuration silently changes its meaning by a factor of 1,000.
    if (!t->empty() && std::isdigit(static_cast<unsigned char>(t->back()))) {
      return Status::InvalidArgument("redis: ttl=" + *t + " needs a unit: " + *t + "s for seconds, " + *t +
                                     "ms for milliseconds (also m, h, d)");
    }
    auto ms = ParseMillis(*t);
    if (!ms.ok()) {
      KVTIER_ASSIGN_OR_RETURN(std::chrono::seconds s, ParseDuration(*t));
      o.ttl = s;
    } else {
      o.ttl = *ms;
    }
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t connect_ms, url.GetUint("connect_timeout_ms", 0, 3'600'000));
  KVTIER_ASSIGN_OR_RETURN(uint64_t timeout_ms, url.GetUint("timeout_ms", 0, 3'600'000));
  if (connect_ms > 0) o.connect_timeout = std::chrono::milliseconds(connect_ms);
  if (timeout_ms > 0) o.timeout = std::chrono::milliseconds(timeout_ms);
  KVTIER_ASSIGN_OR_RETURN(uint64_t conns, url.GetUint("conns_per_node", 4, 256));
  if (conns == 0) return Status::InvalidArgument("redis: conns_per_node must be at least 1");
  o.conns_per_node = static_cast<int>(conns);
  if (const auto* n = get("namespace")) o.ns = *n;
  return o;
}

std::vector<std::string> RedisUrlOptionNames() {
  return std::vector<std::string>(std::begin(kRedisUrlOptions), std::end(kRedisUrlOptions));
}

}  // namespace kvtier::redis
