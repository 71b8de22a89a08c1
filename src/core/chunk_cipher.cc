#include "core/chunk_cipher.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "core/input_file.h"

namespace kvtier::internal {
namespace {

constexpr char kSalt[] = "kvtier chunk key";
constexpr char kInfo[] = "kvtier-chunk-v2";
constexpr size_t kMaxUpdate = 1u << 30;  // EVP lengths are int

const EVP_CIPHER* Aes256Gcm() {
  // Fetched once and never changed: EVP_aes_256_gcm() looks the implementation up on every call.
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return cipher;
}

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, CtxFree>;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses the key file's bytes into `out`; false when they are neither 32 raw bytes nor 64 hex digits.
bool ParseKeyBytes(const unsigned char* in, size_t n, unsigned char* out) {
  if (n == kCipherKeyBytes) {
    std::memcpy(out, in, n);
    return true;
  }
  if (n == 2 * kCipherKeyBytes + 1 && in[n - 1] == '\n') --n;
  if (n != 2 * kCipherKeyBytes) return false;
  for (size_t i = 0; i < kCipherKeyBytes; ++i) {
    const int hi = HexValue(static_cast<char>(in[2 * i]));
    const int lo = HexValue(static_cast<char>(in[2 * i + 1]));
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

// Walks `in` and `out` (same total size) in step, calling fn(in, out, len) on runs of at most kMaxUpdate
// bytes that lie in one piece of each.
template <class In, class Out, class Fn>
bool Stream(In in, Out out, Fn fn) {
  size_t ii = 0, io = 0, oi = 0, oo = 0;
  while (ii < in.size() && oi < out.size()) {
    if (io == in[ii].size()) { ++ii; io = 0; continue; }
    if (oo == out[oi].size()) { ++oi; oo = 0; continue; }
    const size_t len = std::min({in[ii].size() - io, out[oi].size() - oo, kMaxUpdate});
    if (!fn(in[ii].data() + io, out[oi].data() + oo, len)) return false;
    io += len;
    oo += len;
  }
  return true;
}

CipherCtx StartGcm(bool encrypt, const NamespaceKey& key, const Nonce& nonce, std::span<const std::byte> aad) {
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr || Aes256Gcm() == nullptr) return nullptr;
  const auto* iv = reinterpret_cast<const unsigned char*>(nonce.data());
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx.get(), Aes256Gcm(), nullptr, key.data(), iv)
                         : EVP_DecryptInit_ex(ctx.get(), Aes256Gcm(), nullptr, key.data(), iv);
  if (ok != 1) return nullptr;
  int outl = 0;
  if (!aad.empty() && EVP_CipherUpdate(ctx.get(), nullptr, &outl, reinterpret_cast<const unsigned char*>(aad.data()),
                                       static_cast<int>(aad.size())) != 1) {
    return nullptr;
  }
  return ctx;
}

bool Update(EVP_CIPHER_CTX* ctx, const std::byte* in, std::byte* out, size_t len) {
  int outl = 0;
  return EVP_CipherUpdate(ctx, reinterpret_cast<unsigned char*>(out), &outl,
                          reinterpret_cast<const unsigned char*>(in), static_cast<int>(len)) == 1 &&
         static_cast<size_t>(outl) == len;  // GCM is a stream mode: nothing is held back
}

}  // namespace

NamespaceKey::~NamespaceKey() { OPENSSL_cleanse(bytes_.data(), bytes_.size()); }

ChunkCipher::~ChunkCipher() { OPENSSL_cleanse(material_.data(), material_.size()); }

Result<std::shared_ptr<const ChunkCipher>> ChunkCipher::FromKeyMaterial(std::span<const std::byte> material) {
  if (material.size() != kCipherKeyBytes) return Status::InvalidArgument("a chunk key is 32 bytes");
  if (std::all_of(material.begin(), material.end(), [](std::byte b) { return b == std::byte{0}; })) {
    return Status::InvalidArgument("a chunk key of all zero bytes is refused");
  }
  std::shared_ptr<ChunkCipher> c(new ChunkCipher());
  std::memcpy(c->material_.data(), material.data(), kCipherKeyBytes);
  return std::shared_ptr<const ChunkCipher>(std::move(c));
}

Result<std::shared_ptr<const ChunkCipher>> ChunkCipher::FromKeyFile(const std::string& path) {
  // The one opener of secrets (core/input_file.h): absolute, no link, regular, bounded, owner-only.
  auto opened = OpenUserFile(path, kMaxKeyFileBytes, "key file", /*secret=*/true);
  if (!opened.ok()) return Status::InvalidArgument(opened.status().message());
  const int fd = *opened;
  std::array<unsigned char, kMaxKeyFileBytes + 1> buf{};
  ssize_t n = -1;
  do {
    n = ::pread(fd, buf.data(), buf.size(), 0);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  std::array<unsigned char, kCipherKeyBytes> key{};
  const bool parsed = n >= 0 && static_cast<size_t>(n) <= kMaxKeyFileBytes &&
                      ParseKeyBytes(buf.data(), static_cast<size_t>(n), key.data());
  OPENSSL_cleanse(buf.data(), buf.size());
  if (!parsed) {
    return Status::InvalidArgument("key file " + path + " must hold exactly 32 raw bytes or 64 hex characters");
  }
  auto c = FromKeyMaterial(std::as_bytes(std::span(key)));
  OPENSSL_cleanse(key.data(), key.size());
  return c;
}

Status ChunkCipher::DeriveKey(const Digest& ns, NamespaceKey* out) const {
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::array<unsigned char, sizeof(kInfo) - 1 + 32> info{};
  std::memcpy(info.data(), kInfo, sizeof(kInfo) - 1);
  std::memcpy(info.data() + sizeof(kInfo) - 1, ns.data(), ns.size());
  size_t len = kCipherKeyBytes;
  const bool ok =
      ctx != nullptr && EVP_PKEY_derive_init(ctx.get()) == 1 &&
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) == 1 &&
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), reinterpret_cast<const unsigned char*>(kSalt), sizeof(kSalt) - 1) == 1 &&
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), material_.data(), static_cast<int>(material_.size())) == 1 &&
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.data(), static_cast<int>(info.size())) == 1 &&
      EVP_PKEY_derive(ctx.get(), out->bytes_.data(), &len) == 1 && len == kCipherKeyBytes;
  return ok ? Status::OK() : Status::Internal("HKDF-SHA256 key derivation failed");
}

Result<Nonce> ChunkCipher::RandomNonceBase() {
  Nonce n;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    return Status::Internal("no random bytes for a chunk nonce");
  }
  return n;
}

Nonce ChunkCipher::PieceNonce(const Nonce& base, uint32_t index) {
  Nonce n = base;
  for (int i = 0; i < 4; ++i) n[kNonceBytes - 1 - i] ^= static_cast<std::byte>(index >> (8 * i));
  return n;
}

Status ChunkCipher::Seal(const NamespaceKey& key, const Nonce& nonce, std::span<const std::byte> aad,
                         GatherList in, std::span<std::byte> out, Tag* tag) {
  CipherCtx ctx = StartGcm(true, key, nonce, aad);
  if (ctx == nullptr || TotalBytes(in) != out.size()) return Status::Internal("AES-GCM encryption setup failed");
  const std::span<std::byte> outs[] = {out};
  const bool ok = Stream(in, std::span<const std::span<std::byte>>(outs),
                         [&](const std::byte* i, std::byte* o, size_t n) { return Update(ctx.get(), i, o, n); });
  int outl = 0;
  unsigned char final_out[16];
  if (!ok || EVP_EncryptFinal_ex(ctx.get(), final_out, &outl) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, tag->data()) != 1) {
    return Status::Internal("AES-GCM encryption failed");
  }
  return Status::OK();
}

Status ChunkCipher::Open(const NamespaceKey& key, const Nonce& nonce, std::span<const std::byte> aad,
                         GatherList in, ScatterList out, const Tag& tag) {
  CipherCtx ctx = StartGcm(false, key, nonce, aad);
  if (ctx == nullptr || TotalBytes(in) != TotalBytes(out)) return Status::Internal("AES-GCM decryption setup failed");
  const bool ok = Stream(in, out, [&](const std::byte* i, std::byte* o, size_t n) { return Update(ctx.get(), i, o, n); });
  Tag expected = tag;
  int outl = 0;
  unsigned char final_out[16];
  if (!ok || EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, expected.data()) != 1) {
    return Status::Internal("AES-GCM decryption failed");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), final_out, &outl) != 1) {
    return Status::Corruption("chunk piece failed authentication (wrong key, forged or damaged)");
  }
  return Status::OK();
}

}  // namespace kvtier::internal
