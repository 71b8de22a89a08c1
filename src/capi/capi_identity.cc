// Engine identities of the C API: namespaces made from an identity's canonical encoding.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "kvtier/engine_identity.h"
#include "kvtier/tier.h"

using kvtier::Status;
using namespace kvtier::capi;

extern "C" {

kvtier_status kvtier_ns_create_identity(const char* identity, const kvtier_layout* layout, const char* tenant,
                                        kvtier_ns** out) {
  return Guard("kvtier_ns_create_identity", [&]() -> Status {
    if (out == nullptr) return NullArgument("kvtier_ns_create_identity", "out");
    *out = nullptr;
    if (identity == nullptr) return NullArgument("kvtier_ns_create_identity", "identity");
    if (layout == nullptr) return NullArgument("kvtier_ns_create_identity", "layout");
    KVTIER_ASSIGN_OR_RETURN(kvtier::EngineIdentity id, kvtier::EngineIdentity::Parse(identity));
    // The layout goes through kvtier_ns_create's own checks, so both entry points accept the same layouts.
    kvtier_ns* plain = nullptr;
    const std::string model(*id.Get("model"));
    if (kvtier_ns_create(model.c_str(), layout, tenant, identity, &plain) != KVTIER_OK) {
      return Status::InvalidArgument(std::string("kvtier_ns_create_identity: ") + kvtier_last_error());
    }
    const kvtier::Layout l = plain->ns.layout();
    kvtier_ns_free(plain);
    KVTIER_ASSIGN_OR_RETURN(kvtier::Namespace ns,
                            kvtier::MakeNamespace(id, l, tenant == nullptr ? std::string_view() : tenant));
    *out = new kvtier_ns{ns};
    return Status::OK();
  });
}

size_t kvtier_ns_identity(const kvtier_ns* ns, char* out, size_t cap) {
  if (ns == nullptr || ns->ns.identity() == nullptr) {
    if (out != nullptr && cap > 0) out[0] = '\0';
    return 0;
  }
  const std::string& text = *ns->ns.identity();
  if (out != nullptr && cap > 0) {
    const size_t n = std::min(cap - 1, text.size());
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return text.size();
}

}  // extern "C"

extern "C" {

kvtier_status kvtier_remove(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys, size_t n_keys) {
  const char* fn = "kvtier_remove";
  return Guard(fn, [&]() -> Status {
    if (store == nullptr) return NullArgument(fn, "store");
    if (ns == nullptr) return NullArgument(fn, "ns");
    KVTIER_ASSIGN_OR_RETURN(std::vector<kvtier::ChunkKey> k, CopyKeys(fn, keys, n_keys));
    return store->store->Remove(ns->ns, k);
  });
}

}  // extern "C"
