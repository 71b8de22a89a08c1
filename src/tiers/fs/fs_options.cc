// Parsing of fs:// URLs into FsTierOptions.
#include <string>

#include "tiers/fs/fs_tier.h"

namespace kvtier::internal {

Result<FsTierOptions> ParseFsTierOptions(const TierUrl& url) {
  KVTIER_RETURN_IF_ERROR(url.CheckKnown({"capacity", "neg_ttl_ms", "pos_ttl_ms", "neg_entries", "touch_s", "direct",
                                         "io_uring", "inflight", "sync", "create", "key_file", "verify_threads",
                                         "policy"}));
  if (url.path.empty()) {
    return Status::InvalidArgument("fs:// needs a directory, e.g. fs:///mnt/shared/kvtier");
  }
  FsTierOptions o;
  o.root = url.path;
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, url.GetSize("capacity", 0));
  KVTIER_ASSIGN_OR_RETURN(uint64_t ttl_ms, url.GetUint("neg_ttl_ms", 1000));
  KVTIER_ASSIGN_OR_RETURN(uint64_t pos_ttl_ms, url.GetUint("pos_ttl_ms", 1000));
  KVTIER_ASSIGN_OR_RETURN(o.neg_entries, url.GetUint("neg_entries", 65536));
  KVTIER_ASSIGN_OR_RETURN(uint64_t touch_s, url.GetUint("touch_s", 60));
  if (auto d = url.params.find("direct"); d != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.direct, ParseFsDirectMode(d->second));
  }
  KVTIER_ASSIGN_OR_RETURN(o.io_uring, url.GetBool("io_uring", true));
  KVTIER_ASSIGN_OR_RETURN(o.inflight_bytes, url.GetSize("inflight", 256ull << 20));
  KVTIER_ASSIGN_OR_RETURN(o.sync, url.GetBool("sync", false));
  KVTIER_ASSIGN_OR_RETURN(o.create, url.GetBool("create", true));
  KVTIER_ASSIGN_OR_RETURN(uint64_t verify_threads, url.GetUint("verify_threads", DefaultVerifyThreads(), 64));
  o.verify_threads = static_cast<unsigned>(verify_threads);
  KVTIER_ASSIGN_OR_RETURN(o.policy, EvictionPolicyOf(url));
  // A day bounds these: a longer negative cache would hide other hosts' chunks for too long, a
  // longer positive one would answer hits for chunks long evicted.
  if (ttl_ms > 86'400'000 || pos_ttl_ms > 86'400'000 || touch_s > 86'400) {
    return Status::InvalidArgument("fs:// neg_ttl_ms, pos_ttl_ms and touch_s are limited to one day");
  }
  if (o.inflight_bytes == 0) return Status::InvalidArgument("fs:// inflight must be positive");
  o.neg_ttl = std::chrono::milliseconds(ttl_ms);
  o.pos_ttl = std::chrono::milliseconds(pos_ttl_ms);
  o.touch_interval = std::chrono::seconds(touch_s);
  if (auto k = url.params.find("key_file"); k != url.params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.cipher, ChunkCipher::FromKeyFile(k->second));
  }
  return o;
}

}  // namespace kvtier::internal
