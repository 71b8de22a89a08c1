#include "tiers/object/object_scheme.h"

#include "tiers/object/object_tier.h"

namespace kvtier::object {

Result<std::unique_ptr<Tier>> OpenObjectTier(std::unique_ptr<ObjectClient> client, ObjectTierOptions options,
                                             std::string url, bool read_only) {
  if (client == nullptr) return Status::InvalidArgument("object tier " + url + " has no client");
  auto tier = std::make_unique<ObjectTier>(std::move(client), std::move(options), std::move(url), read_only);
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<Tier>(std::move(tier));
}

TierFactory ObjectTierFactory(ObjectClientFactory factory, std::vector<std::string> backend_options) {
  return [factory = std::move(factory), backend_options = std::move(backend_options)](
             const TierUrl& url, const TierOpenOptions& open) -> Result<std::unique_ptr<Tier>> {
    KVTIER_ASSIGN_OR_RETURN(ObjectTierOptions options, ParseObjectTierOptions(url, backend_options, open));
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ObjectClient> client, factory(url, options.client));
    return OpenObjectTier(std::move(client), std::move(options), url.ToString(), open.read_only);
  };
}

}  // namespace kvtier::object
