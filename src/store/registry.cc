// The scheme -> factory registry behind OpenTier. Built-in tiers register here at first use.
#include <map>

#include "core/thread_annotations.h"
#include "store/builtin_tiers.h"
#include "kvtier/tier.h"

namespace kvtier {
namespace {

struct Registry {
  internal::Mutex mu;
  std::map<std::string, TierFactory> factories GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    internal::RegisterBuiltinTiers([reg](const std::string& scheme, TierFactory f) {
      internal::MutexLock lock(reg->mu);  // not yet shared; taken to keep one rule for `factories`
      reg->factories[scheme] = std::move(f);
    });
    return reg;
  }();
  return *r;
}

}  // namespace

void RegisterTierScheme(const std::string& scheme, TierFactory factory) {
  Registry& r = GetRegistry();
  internal::MutexLock lock(r.mu);
  r.factories[scheme] = std::move(factory);
}

Result<std::unique_ptr<Tier>> OpenTier(std::string_view url, const TierOpenOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(TierUrl parsed, TierUrl::Parse(url));
  TierFactory factory;
  {
    Registry& r = GetRegistry();
    internal::MutexLock lock(r.mu);
    auto it = r.factories.find(parsed.scheme);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [s, f] : r.factories) known += (known.empty() ? "" : ", ") + s + "://";
      return Status::InvalidArgument("unknown tier scheme '" + parsed.scheme + "://' (known: " + known +
                                     ")");
    }
    factory = it->second;
  }
  return factory(parsed, options);
}

}  // namespace kvtier
