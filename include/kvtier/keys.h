// Namespaces and chunk keys.
//
// A Namespace is the SHA-256 digest of (domain tag, model identity, layout fingerprint, tenant, salt),
// each length-prefixed; plain namespaces (Make) and engine-identity ones (MakeNamespace) hash different
// tags. Chunks of different namespaces are never shared or revealed to each other.
//
// A chunk key names a whole prefix: key[i] = SHA-256(namespace || key[i-1] || tokens of chunk i as
// little-endian u32), with key[-1] = 32 zero bytes. Keys depend only on their inputs, so they are
// identical across processes, hosts and restarts. All functions here are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

using Digest = std::array<uint8_t, 32>;

std::string DigestHex(const Digest& d);                 // 64 lower-case hex characters
Result<Digest> DigestFromHex(std::string_view hex);     // InvalidArgument unless 64 hex characters

struct ChunkKey {
  Digest bytes{};
  std::string Hex() const { return DigestHex(bytes); }
  bool operator==(const ChunkKey&) const = default;
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const {
    size_t h;
    std::memcpy(&h, k.bytes.data(), sizeof(h));  // the key is already a uniform hash
    return h;
  }
};

class EngineIdentity;  // kvtier/engine_identity.h

class Namespace {
 public:
  // InvalidArgument when `model_id` is empty or `layout` is invalid.
  static Result<Namespace> Make(std::string_view model_id, const Layout& layout,
                                std::string_view tenant, std::string_view salt = {});

  const Digest& id() const { return id_; }
  const Layout& layout() const { return layout_; }
  uint64_t fingerprint() const { return fingerprint_; }  // layout().Fingerprint(), computed once
  // layout().InternedPieceLengths() (null for a classic layout): ChunkId::Of hands it to writers.
  const std::vector<uint64_t>* piece_lengths() const { return piece_lengths_; }
  std::string Hex() const { return DigestHex(id_); }
  // The canonical engine identity this namespace was made from (kvtier/engine_identity.h), or
  // nullptr for a namespace made from a model id and salt. Display only: a Store writes it beside the
  // namespace's chunks on first save, for `kvtier inspect`.
  const std::string* identity() const { return identity_.get(); }

 private:
  friend Result<Namespace> MakeNamespace(const EngineIdentity&, const Layout&, std::string_view);
  // The first, length-prefixed input of the id's hash: plain namespaces (Make) and engine-identity
  // namespaces (MakeNamespace) hash distinct tags, so no salt of one can give an id of the other.
  static constexpr std::string_view kPlainDomain = "kvtier-namespace-v1";
  static constexpr std::string_view kIdentityDomain = "kvtier-identity-namespace-v2";
  static Result<Namespace> MakeInDomain(std::string_view domain, std::string_view model_id, const Layout& layout,
                                        std::string_view tenant, std::string_view salt);
  Namespace(const Digest& id, const Layout& layout);
  void SetIdentity(std::string encoding) { identity_ = std::make_shared<const std::string>(std::move(encoding)); }
  Digest id_{};
  Layout layout_{};
  uint64_t fingerprint_ = 0;
  const std::vector<uint64_t>* piece_lengths_ = nullptr;
  std::shared_ptr<const std::string> identity_;
};

// Key of the chunk that follows `prev` (nullptr for the first chunk) and holds `tokens`.
ChunkKey NextChunkKey(const Namespace& ns, const ChunkKey* prev, std::span<const uint32_t> tokens);

// Keys of every full chunk of `tokens`: tokens.size() / tokens_per_chunk of them. A trailing partial
// chunk has no key (it is never cached).
std::vector<ChunkKey> ComputeChunkKeys(const Namespace& ns, std::span<const uint32_t> tokens);
// The same for a namespace known only by its id and chunk size (a router asking `kvtier serve`): the
// keys depend on nothing else. REQUIRES: tokens_per_chunk > 0.
std::vector<ChunkKey> ComputeChunkKeys(const Digest& ns_id, uint32_t tokens_per_chunk,
                                       std::span<const uint32_t> tokens);

}  // namespace kvtier
