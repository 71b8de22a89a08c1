// Incremental SHA-256 over OpenSSL's EVP interface (the low-level SHA256_* calls are deprecated).
// One object per thread; not thread-safe.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/keys.h"

namespace kvtier::internal {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t len);
  // Appends an 8-byte little-endian length, then the bytes: keeps concatenated fields unambiguous.
  void UpdateLengthPrefixed(std::string_view s);
  Digest Final();  // the object may be reused after Final

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace kvtier::internal
