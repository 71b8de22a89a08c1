#include "kvtier/keys.h"

#include <bit>
#include <string>
#include <utility>

#include "core/sha256.h"

namespace kvtier {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string DigestHex(const Digest& d) {
  std::string out(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = kHexDigits[d[i] >> 4];
    out[2 * i + 1] = kHexDigits[d[i] & 0xF];
  }
  return out;
}

Result<Digest> DigestFromHex(std::string_view hex) {
  Digest d{};
  if (hex.size() != 64) return Status::InvalidArgument("a digest is 64 hex characters");
  for (size_t i = 0; i < d.size(); ++i) {
    int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("not a hex digest: " + std::string(hex));
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

Namespace::Namespace(const Digest& id, const Layout& layout)
    : id_(id), layout_(layout), fingerprint_(layout.Fingerprint()) {
  if (!layout.classic()) piece_lengths_ = layout.InternedPieceLengths();
}

Result<Namespace> Namespace::Make(std::string_view model_id, const Layout& layout,
                                  std::string_view tenant, std::string_view salt) {
  return MakeInDomain(kPlainDomain, model_id, layout, tenant, salt);
}

Result<Namespace> Namespace::MakeInDomain(std::string_view domain, std::string_view model_id, const Layout& layout,
                                          std::string_view tenant, std::string_view salt) {
  if (model_id.empty()) return Status::InvalidArgument("a namespace needs a model id");
  // A NUL would end the string in C and Python callers: two ids differing after it would be one.
  const std::pair<const char*, std::string_view> texts[] = {{"model id", model_id}, {"tenant", tenant},
                                                            {"salt", salt}};
  for (const auto& [what, text] : texts) {
    if (text.find('\0') != std::string_view::npos) {
      return Status::InvalidArgument(std::string("a namespace ") + what + " contains a NUL character");
    }
  }
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  internal::Sha256 h;
  h.UpdateLengthPrefixed(domain);  // length-prefixed first: no salt of one domain reaches another
  h.UpdateLengthPrefixed(model_id);
  uint8_t fp[8];
  const uint64_t f = layout.Fingerprint();
  for (int i = 0; i < 8; ++i) fp[i] = static_cast<uint8_t>(f >> (8 * i));
  h.Update(fp, sizeof(fp));
  h.UpdateLengthPrefixed(tenant);
  h.UpdateLengthPrefixed(salt);
  return Namespace(h.Final(), layout);
}

namespace {

ChunkKey NextKey(const Digest& ns_id, const ChunkKey* prev, std::span<const uint32_t> tokens) {
  static_assert(std::endian::native == std::endian::little,
                "token ids are hashed as little-endian u32; add a byte swap for big-endian hosts");
  static const Digest kZero{};
  thread_local internal::Sha256 h;
  h.Update(ns_id.data(), ns_id.size());
  const Digest& p = prev ? prev->bytes : kZero;
  h.Update(p.data(), p.size());
  h.Update(tokens.data(), tokens.size_bytes());
  return ChunkKey{h.Final()};
}

}  // namespace

ChunkKey NextChunkKey(const Namespace& ns, const ChunkKey* prev, std::span<const uint32_t> tokens) {
  return NextKey(ns.id(), prev, tokens);
}

std::vector<ChunkKey> ComputeChunkKeys(const Namespace& ns, std::span<const uint32_t> tokens) {
  return ComputeChunkKeys(ns.id(), ns.layout().tokens_per_chunk, tokens);
}

std::vector<ChunkKey> ComputeChunkKeys(const Digest& ns_id, uint32_t tokens_per_chunk,
                                       std::span<const uint32_t> tokens) {
  const size_t tpc = tokens_per_chunk;
  const size_t n = tokens.size() / tpc;
  std::vector<ChunkKey> keys;
  keys.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    keys.push_back(NextKey(ns_id, i ? &keys[i - 1] : nullptr, tokens.subspan(i * tpc, tpc)));
  }
  return keys;
}

}  // namespace kvtier
