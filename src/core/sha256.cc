#include "core/sha256.h"

#include <cstdlib>

namespace kvtier::internal {
namespace {

const EVP_MD* Sha256Md() {
  // Fetched once: EVP_sha256() looks the implementation up on every call in OpenSSL 3.
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, Sha256Md(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(const void* data, size_t len) { EVP_DigestUpdate(ctx_, data, len); }

void Sha256::UpdateLengthPrefixed(std::string_view s) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(s.size()) >> (8 * i));
  Update(len, sizeof(len));
  Update(s.data(), s.size());
}

Digest Sha256::Final() {
  Digest d{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_, d.data(), &n);
  EVP_DigestInit_ex(ctx_, Sha256Md(), nullptr);
  return d;
}

}  // namespace kvtier::internal
