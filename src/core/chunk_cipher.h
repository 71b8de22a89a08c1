// AES-256-GCM for encrypted chunks (chunk format v2, docs/encryption.md). A ChunkCipher holds the
// master key read from a key file; every namespace gets its own key derived with HKDF-SHA256, so two
// namespaces (tenants) never share one. Each piece of a chunk is sealed on its own with a nonce derived
// from the chunk's random nonce base and the piece index, and with the chunk's header fields and the
// piece index as associated data.
//
// Thread-safe: a ChunkCipher is immutable after creation; every call uses its own EVP context. Key
// bytes are never logged or put into a Status message, and are wiped when freed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr size_t kCipherKeyBytes = 32;
inline constexpr size_t kNonceBytes = 12;
inline constexpr size_t kTagBytes = 16;
// Largest key file accepted: 64 hex characters and a line end.
inline constexpr size_t kMaxKeyFileBytes = 66;

using Nonce = std::array<std::byte, kNonceBytes>;
using Tag = std::array<std::byte, kTagBytes>;

// A namespace's derived key. Wiped on destruction.
class NamespaceKey {
 public:
  NamespaceKey() = default;
  NamespaceKey(const NamespaceKey&) = delete;
  NamespaceKey& operator=(const NamespaceKey&) = delete;
  ~NamespaceKey();
  const unsigned char* data() const { return bytes_.data(); }

 private:
  friend class ChunkCipher;
  std::array<unsigned char, kCipherKeyBytes> bytes_{};
};

class ChunkCipher {
 public:
  ChunkCipher(const ChunkCipher&) = delete;
  ChunkCipher& operator=(const ChunkCipher&) = delete;
  ~ChunkCipher();

  // Reads a key file: exactly 32 raw bytes, or 64 hex characters with an optional trailing newline.
  // The file must be a regular file (a link is not followed), at most kMaxKeyFileBytes long, and not
  // readable or writable by group or others. InvalidArgument otherwise; the message never holds key bytes.
  static Result<std::shared_ptr<const ChunkCipher>> FromKeyFile(const std::string& path);
  // From 32 bytes of key material (tests, benches).
  static Result<std::shared_ptr<const ChunkCipher>> FromKeyMaterial(std::span<const std::byte> material);

  // HKDF-SHA256(material, salt "kvtier chunk key", info "kvtier-chunk-v2" || ns). Internal on failure.
  Status DeriveKey(const Digest& ns, NamespaceKey* out) const;

  // A fresh random nonce base from the OpenSSL CSPRNG.
  static Result<Nonce> RandomNonceBase();
  // The nonce of piece `index`: the base with the index XORed into its last four bytes (big-endian).
  static Nonce PieceNonce(const Nonce& base, uint32_t index);

  // Encrypts `in` (the pieces of one chunk piece, in order) into `out` (same total size) and returns
  // the tag. `aad` is authenticated, not encrypted.
  static Status Seal(const NamespaceKey& key, const Nonce& nonce, std::span<const std::byte> aad,
                     GatherList in, std::span<std::byte> out, Tag* tag);
  // Decrypts `in` into `out` (same total size; in and out may be the same memory, piece by piece) and
  // checks `tag`. Corruption when the tag does not authenticate; `out` then holds garbage the caller
  // must discard (the readers zero it).
  static Status Open(const NamespaceKey& key, const Nonce& nonce, std::span<const std::byte> aad,
                     GatherList in, ScatterList out, const Tag& tag);

 private:
  ChunkCipher() = default;
  std::array<unsigned char, kCipherKeyBytes> material_{};
};

}  // namespace kvtier::internal
