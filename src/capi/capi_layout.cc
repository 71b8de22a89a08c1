// Layouts of every model family in the C API: namespaces from a layout spec (kvtier/layout.h,
// ParseLayoutSpec), a namespace's spec, and the presets' specs.
#include <algorithm>
#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "kvtier/engine_identity.h"
#include "kvtier/layout.h"

using kvtier::Status;
using namespace kvtier::capi;

namespace {

// Copies `text` NUL-terminated into out[0..cap) (truncated) and returns its length.
size_t CopyOut(const std::string& text, char* out, size_t cap) {
  if (out != nullptr && cap > 0) {
    const size_t n = std::min(cap - 1, text.size());
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return text.size();
}

std::string_view OrEmpty(const char* s) { return s == nullptr ? std::string_view() : std::string_view(s); }

}  // namespace

extern "C" {

kvtier_status kvtier_ns_create_spec(const char* model_id, const char* layout_spec, const char* tenant,
                                    const char* salt, kvtier_ns** out) {
  const char* fn = "kvtier_ns_create_spec";
  return Guard(fn, [&]() -> Status {
    if (out == nullptr) return NullArgument(fn, "out");
    *out = nullptr;
    if (model_id == nullptr) return NullArgument(fn, "model_id");
    if (layout_spec == nullptr) return NullArgument(fn, "layout_spec");
    KVTIER_ASSIGN_OR_RETURN(kvtier::Layout l, kvtier::ParseLayoutSpec(layout_spec));
    KVTIER_ASSIGN_OR_RETURN(kvtier::Namespace ns,
                            kvtier::Namespace::Make(model_id, l, OrEmpty(tenant), OrEmpty(salt)));
    *out = new kvtier_ns{ns};
    return Status::OK();
  });
}

kvtier_status kvtier_ns_create_identity_spec(const char* identity, const char* layout_spec, const char* tenant,
                                             kvtier_ns** out) {
  const char* fn = "kvtier_ns_create_identity_spec";
  return Guard(fn, [&]() -> Status {
    if (out == nullptr) return NullArgument(fn, "out");
    *out = nullptr;
    if (identity == nullptr) return NullArgument(fn, "identity");
    if (layout_spec == nullptr) return NullArgument(fn, "layout_spec");
    KVTIER_ASSIGN_OR_RETURN(kvtier::EngineIdentity id, kvtier::EngineIdentity::Parse(identity));
    KVTIER_ASSIGN_OR_RETURN(kvtier::Layout l, kvtier::ParseLayoutSpec(layout_spec));
    KVTIER_ASSIGN_OR_RETURN(kvtier::Namespace ns, kvtier::MakeNamespace(id, l, OrEmpty(tenant)));
    *out = new kvtier_ns{ns};
    return Status::OK();
  });
}

size_t kvtier_ns_layout_spec(const kvtier_ns* ns, char* out, size_t cap) {
  if (ns == nullptr) return CopyOut("", out, cap);
  return CopyOut(ns->ns.layout().Spec(), out, cap);
}

size_t kvtier_preset_layout_spec(const char* name, char* out, size_t cap) {
  auto preset = kvtier::FindModelPreset(OrEmpty(name));
  return CopyOut(preset.ok() ? preset->layout.Spec() : std::string(), out, cap);
}

}  // extern "C"
