// Namespaces and chunk keys of the C API.
#include <algorithm>
#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "kvtier/layout.h"

using kvtier::Status;
using namespace kvtier::capi;

namespace {

kvtier::Result<kvtier::Layout> ToLayout(const kvtier_layout& l) {
  if (l.dtype > KVTIER_DTYPE_FP8) {
    return Status::InvalidArgument("kvtier_ns_create: unknown dtype " + std::to_string(l.dtype));
  }
  kvtier::Layout out;
  out.layers = l.layers;
  out.kv_heads = l.kv_heads;
  out.head_dim = l.head_dim;
  out.dtype = static_cast<kvtier::DType>(l.dtype);
  out.tokens_per_chunk = l.tokens_per_chunk;
  return out;
}

// NULL and "" are the same: no tenant, no salt.
std::string_view OrEmpty(const char* s) { return s == nullptr ? std::string_view() : std::string_view(s); }

bool CheckNs(const char* fn, const kvtier_ns* ns) {
  if (ns != nullptr) return true;
  (void)Fail(NullArgument(fn, "ns"));
  return false;
}

}  // namespace

extern "C" {

kvtier_status kvtier_ns_create(const char* model_id, const kvtier_layout* layout, const char* tenant,
                               const char* salt, kvtier_ns** out) {
  return Guard("kvtier_ns_create", [&]() -> Status {
    if (out == nullptr) return NullArgument("kvtier_ns_create", "out");
    *out = nullptr;
    if (model_id == nullptr) return NullArgument("kvtier_ns_create", "model_id");
    if (layout == nullptr) return NullArgument("kvtier_ns_create", "layout");
    KVTIER_ASSIGN_OR_RETURN(kvtier::Layout l, ToLayout(*layout));
    KVTIER_ASSIGN_OR_RETURN(kvtier::Namespace ns,
                            kvtier::Namespace::Make(model_id, l, OrEmpty(tenant), OrEmpty(salt)));
    *out = new kvtier_ns{ns};
    return Status::OK();
  });
}

kvtier_status kvtier_ns_create_n(const char* model_id, size_t model_id_len, const kvtier_layout* layout,
                                 const char* tenant, size_t tenant_len, const char* salt, size_t salt_len,
                                 kvtier_ns** out) {
  const char* fn = "kvtier_ns_create_n";
  return Guard(fn, [&]() -> Status {
    if (out == nullptr) return NullArgument(fn, "out");
    *out = nullptr;
    if (model_id == nullptr && model_id_len > 0) return NullArgument(fn, "model_id");
    if (tenant == nullptr && tenant_len > 0) return NullArgument(fn, "tenant");
    if (salt == nullptr && salt_len > 0) return NullArgument(fn, "salt");
    if (layout == nullptr) return NullArgument(fn, "layout");
    KVTIER_ASSIGN_OR_RETURN(kvtier::Layout l, ToLayout(*layout));
    auto view = [](const char* s, size_t n) { return n == 0 ? std::string_view() : std::string_view(s, n); };
    KVTIER_ASSIGN_OR_RETURN(kvtier::Namespace ns,
                            kvtier::Namespace::Make(view(model_id, model_id_len), l, view(tenant, tenant_len),
                                                    view(salt, salt_len)));
    *out = new kvtier_ns{ns};
    return Status::OK();
  });
}

void kvtier_ns_free(kvtier_ns* ns) { delete ns; }

uint64_t kvtier_ns_chunk_bytes(const kvtier_ns* ns) {
  return CheckNs("kvtier_ns_chunk_bytes", ns) ? ns->ns.layout().BytesPerChunk() : 0;
}

uint32_t kvtier_ns_tokens_per_chunk(const kvtier_ns* ns) {
  return CheckNs("kvtier_ns_tokens_per_chunk", ns) ? ns->ns.layout().tokens_per_chunk : 0;
}

void kvtier_ns_id(const kvtier_ns* ns, uint8_t out[KVTIER_KEY_BYTES]) {
  if (out == nullptr) {
    (void)Fail(NullArgument("kvtier_ns_id", "out"));
    return;
  }
  if (!CheckNs("kvtier_ns_id", ns)) {
    std::memset(out, 0, KVTIER_KEY_BYTES);
    return;
  }
  std::memcpy(out, ns->ns.id().data(), KVTIER_KEY_BYTES);
}

size_t kvtier_chunk_keys(const kvtier_ns* ns, const uint32_t* tokens, size_t n_tokens, kvtier_key* out,
                         size_t cap) {
  const char* fn = "kvtier_chunk_keys";
  if (!CheckNs(fn, ns)) return 0;
  const char* null_arg = (tokens == nullptr && n_tokens > 0) ? "tokens"
                         : (out == nullptr && cap > 0)        ? "out"
                                                              : nullptr;
  if (null_arg != nullptr) {
    (void)Fail(NullArgument(fn, null_arg));
    return 0;
  }
  const size_t per = ns->ns.layout().tokens_per_chunk;
  const size_t total = n_tokens / per;
  const size_t n = std::min(total, cap);
  return GuardValue(fn, size_t{0}, [&] {
    kvtier::ChunkKey key;
    for (size_t i = 0; i < n; ++i) {
      key = kvtier::NextChunkKey(ns->ns, i == 0 ? nullptr : &key,
                                 std::span<const uint32_t>(tokens + i * per, per));
      std::memcpy(out[i].bytes, key.bytes.data(), KVTIER_KEY_BYTES);
    }
    return total;
  });
}

kvtier_status kvtier_next_chunk_key(const kvtier_ns* ns, const kvtier_key* prev, const uint32_t* tokens,
                                    size_t n_tokens, kvtier_key* out) {
  const char* fn = "kvtier_next_chunk_key";
  return Guard(fn, [&]() -> Status {
    if (ns == nullptr) return NullArgument(fn, "ns");
    if (out == nullptr) return NullArgument(fn, "out");
    if (tokens == nullptr) return NullArgument(fn, "tokens");
    const uint32_t per = ns->ns.layout().tokens_per_chunk;
    if (n_tokens != per) {
      return Status::InvalidArgument(std::string(fn) + ": " + std::to_string(n_tokens) +
                                     " tokens given, a chunk holds " + std::to_string(per));
    }
    kvtier::ChunkKey p;
    if (prev != nullptr) std::memcpy(p.bytes.data(), prev->bytes, KVTIER_KEY_BYTES);
    const kvtier::ChunkKey k =
        kvtier::NextChunkKey(ns->ns, prev == nullptr ? nullptr : &p, std::span<const uint32_t>(tokens, per));
    std::memcpy(out->bytes, k.bytes.data(), KVTIER_KEY_BYTES);
    return Status::OK();
  });
}

}  // extern "C"
