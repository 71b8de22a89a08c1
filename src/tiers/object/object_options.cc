#include "tiers/object/object_options.h"

#include <algorithm>

namespace kvtier::object {

const std::vector<std::string_view>& SharedObjectOptionNames() {
  static const std::vector<std::string_view> names = {"inflight",   "retries",            "backoff_ms",
                                                      "retry_budget_ms", "timeout_ms", "connect_timeout_ms",
                                                      "capacity",   "key_file",           "prefix"};
  return names;
}

namespace {

Status CheckOptionNames(const TierUrl& url, const std::vector<std::string>& backend_options) {
  for (const auto& [name, value] : url.params) {
    const auto& shared = SharedObjectOptionNames();
    if (std::find(shared.begin(), shared.end(), name) != shared.end()) continue;
    if (std::find(backend_options.begin(), backend_options.end(), name) != backend_options.end()) continue;
    std::string known;
    for (auto n : shared) known += (known.empty() ? "" : ", ") + std::string(n);
    for (const auto& n : backend_options) known += ", " + n;
    return Status::InvalidArgument("unknown option '" + name + "' for " + url.scheme + ":// (known: " + known + ")");
  }
  return Status::OK();
}

constexpr uint64_t kMaxMs = 3'600'000;  // an hour bounds every delay and timeout

Result<std::chrono::milliseconds> Millis(const TierUrl& url, const std::string& name, uint64_t def) {
  KVTIER_ASSIGN_OR_RETURN(uint64_t ms, url.GetUint(name, def, kMaxMs));
  return std::chrono::milliseconds(ms);
}

}  // namespace

Result<ObjectTierOptions> ParseObjectTierOptions(const TierUrl& url, const std::vector<std::string>& backend_options,
                                                 const TierOpenOptions& open) {
  KVTIER_RETURN_IF_ERROR(CheckOptionNames(url, backend_options));
  ObjectTierOptions o;
  KVTIER_ASSIGN_OR_RETURN(o.inflight_bytes, url.GetSize("inflight", 256ull << 20));
  if (o.inflight_bytes == 0) return Status::InvalidArgument(url.scheme + ":// inflight must be positive");
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, url.GetSize("capacity", 0));
  if (url.params.count("capacity") != 0 && o.capacity_bytes == 0) {
    return Status::InvalidArgument(url.scheme + ":// capacity must be positive");
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t retries, url.GetUint("retries", 3, 100));
  o.retry.retries = static_cast<uint32_t>(retries);
  KVTIER_ASSIGN_OR_RETURN(o.retry.backoff, Millis(url, "backoff_ms", 10));
  KVTIER_ASSIGN_OR_RETURN(o.retry.budget, Millis(url, "retry_budget_ms", 2000));
  KVTIER_ASSIGN_OR_RETURN(o.client.timeout, Millis(url, "timeout_ms", 0));
  KVTIER_ASSIGN_OR_RETURN(o.client.connect_timeout, Millis(url, "connect_timeout_ms", 0));
  o.client.read_only = open.read_only;
  if (auto p = url.params.find("prefix"); p != url.params.end()) o.prefix = p->second;
  if (auto k = url.params.find("key_file"); k != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.cipher, internal::ChunkCipher::FromKeyFile(k->second));
  }
  return o;
}

}  // namespace kvtier::object
