#include "core/chunk_format.h"

#include "core/xxh3.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvtier::internal {
namespace {

constexpr size_t kV1FieldsEnd = 104;    // v1: bytes covered by the header checksum
constexpr size_t kV2ChecksumAt = 4088;  // v2: the header checksum covers [0, 4088)
constexpr size_t kTableAt = kAuthenticatedHeaderBytes;

void Put64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void Put32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t Get64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t Get32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

uint32_t PieceCount(uint64_t payload_bytes, uint32_t piece_bytes) {
  return payload_bytes == 0 ? 1 : static_cast<uint32_t>((payload_bytes + piece_bytes - 1) / piece_bytes);
}

// Fields common to both versions: [0, 96).
void PutIdentity(const ChunkHeader& h, std::byte* p) {
  Put64(p + 0, kChunkMagic);
  Put32(p + 8, h.version);
  Put32(p + 12, static_cast<uint32_t>(kChunkHeaderSize));
  std::memcpy(p + 16, h.id.ns.data(), 32);
  std::memcpy(p + 48, h.id.key.bytes.data(), 32);
  Put64(p + 80, h.id.layout_fingerprint);
  Put64(p + 88, h.payload_bytes);
}

void GetIdentity(const std::byte* p, ChunkHeader* h) {
  std::memcpy(h->id.ns.data(), p + 16, 32);
  std::memcpy(h->id.key.bytes.data(), p + 48, 32);
  h->id.layout_fingerprint = Get64(p + 80);
  h->payload_bytes = Get64(p + 88);
}

size_t TableEntryBytes(const ChunkHeader& h) { return h.encrypted() ? kTagBytes : 8; }

// Listed pieces: their lengths follow the sums (or tags) in the table.
void SetStarts(ChunkHeader* h, std::span<const uint64_t> lengths) {
  h->piece_starts.assign(1, 0);
  for (uint64_t n : lengths) h->piece_starts.push_back(h->piece_starts.back() + n);
}

Status DecodeLengths(const std::byte* t, ChunkHeader* h) {
  if (h->piece_bytes != 0 || h->piece_count == 0 || h->piece_count > kMaxListedPieces) {
    return Status::Corruption("chunk with listed pieces has a piece size or count out of range");
  }
  std::vector<uint64_t> lengths(h->piece_count);
  for (uint32_t i = 0; i < h->piece_count; ++i) {
    lengths[i] = Get32(t + h->piece_count * TableEntryBytes(*h) + i * 4);
    if (lengths[i] == 0 || lengths[i] > kMaxPieceBytes) return Status::Corruption("chunk piece length out of range");
  }
  SetStarts(h, lengths);
  if (h->piece_starts.back() != h->payload_bytes) return Status::Corruption("chunk piece lengths do not add up to its payload");
  return Status::OK();
}

// v2 fields [96, 128): the rest of what every encrypted piece authenticates.
void PutV2Fields(const ChunkHeader& h, std::byte* p) {
  Put32(p + 96, h.flags);
  Put32(p + 100, h.piece_bytes);
  Put32(p + 104, h.piece_count);
  Put32(p + 108, 0);
  std::memcpy(p + 112, h.nonce_base.data(), kNonceBytes);
  Put32(p + 124, 0);
}

Status DecodeV2(const std::byte* p, ChunkHeader* h) {
  h->flags = Get32(p + 96);
  h->piece_bytes = Get32(p + 100);
  h->piece_count = Get32(p + 104);
  std::memcpy(h->nonce_base.data(), p + 112, kNonceBytes);
  if ((h->flags & ~(kChunkFlagEncrypted | kChunkFlagListedPieces)) != 0 || Get32(p + 108) != 0 ||
      Get32(p + 124) != 0) {
    return Status::Corruption("chunk header has unknown flags or reserved bits set");
  }
  const uint32_t pb = h->piece_bytes;
  if (h->listed()) {
    KVTIER_RETURN_IF_ERROR(DecodeLengths(p + kTableAt, h));
  } else if (pb < kChunkAlign || pb > kMaxPieceBytes || (pb & (pb - 1)) != 0) {
    return Status::Corruption("chunk piece size out of range");
  } else if (h->piece_count > kMaxPieces || h->piece_count != PieceCount(h->payload_bytes, pb)) {
    return Status::Corruption("chunk piece count does not match its payload");
  }
  const uint8_t* nb = reinterpret_cast<const uint8_t*>(h->nonce_base.data());
  if (!h->encrypted() && std::any_of(nb, nb + kNonceBytes, [](uint8_t b) { return b != 0; })) {
    return Status::Corruption("plain chunk carries a nonce");
  }
  const std::byte* t = p + kTableAt;
  const size_t table_end = kTableAt + size_t{h->piece_count} * (TableEntryBytes(*h) + (h->listed() ? 4 : 0));
  if (std::any_of(p + table_end, p + kV2ChecksumAt, [](std::byte b) { return b != std::byte{0}; })) {
    return Status::Corruption("chunk header padding is not zero");
  }
  if (h->encrypted()) {
    h->piece_tags.resize(h->piece_count);
    for (uint32_t i = 0; i < h->piece_count; ++i) std::memcpy(h->piece_tags[i].data(), t + i * kTagBytes, kTagBytes);
  } else {
    h->piece_sums.resize(h->piece_count);
    for (uint32_t i = 0; i < h->piece_count; ++i) h->piece_sums[i] = Get64(t + i * 8);
  }
  return Status::OK();
}

template <class List, class Span>
void SubListImpl(List list, uint64_t offset, uint64_t len, std::vector<Span>& out) {
  out.clear();
  uint64_t at = 0;
  for (const auto& piece : list) {
    const uint64_t end = at + piece.size();
    if (len > 0 && end > offset && at < offset + len) {
      const uint64_t from = std::max(at, offset) - at;
      const uint64_t to = std::min(end, offset + len) - at;
      out.push_back(piece.subspan(from, to - from));
    }
    at = end;
  }
}

}  // namespace

uint64_t ChunkHeader::PieceOffset(uint32_t i) const {
  if (version == kChunkFormatV1) return 0;
  if (listed()) return i < piece_starts.size() ? piece_starts[i] : payload_bytes;
  return uint64_t{i} * piece_bytes;
}

uint64_t ChunkHeader::PieceLength(uint32_t i) const {
  if (version == kChunkFormatV1) return payload_bytes;
  if (listed()) return i + 1 < piece_starts.size() ? piece_starts[i + 1] - piece_starts[i] : 0;
  const uint64_t off = PieceOffset(i);
  return off >= payload_bytes ? 0 : std::min<uint64_t>(piece_bytes, payload_bytes - off);
}

uint32_t ChunkHeader::PieceAt(uint64_t offset) const {
  const uint32_t n = pieces();
  if (n <= 1) return 0;
  if (listed()) {
    const auto it = std::upper_bound(piece_starts.begin(), piece_starts.begin() + n, offset);
    return static_cast<uint32_t>(it - piece_starts.begin()) - 1;
  }
  return static_cast<uint32_t>(std::min<uint64_t>(offset / piece_bytes, n - 1));
}

uint32_t PieceBytesFor(uint64_t payload_bytes) {
  uint64_t pb = kMinPieceBytes;
  while (pb < kMaxPieceBytes && PieceCount(payload_bytes, static_cast<uint32_t>(pb)) > kMaxPieces) pb *= 2;
  return static_cast<uint32_t>(pb);
}

ChunkHeader NewChunkHeader(const ChunkId& id, uint64_t payload_bytes, bool encrypted) {
  ChunkHeader h;
  h.version = kChunkFormatVersion;
  h.id = id;
  h.payload_bytes = payload_bytes;
  h.flags = encrypted ? kChunkFlagEncrypted : 0;
  uint64_t listed = 0;
  bool usable = id.piece_lengths != nullptr && !id.piece_lengths->empty() &&
                id.piece_lengths->size() <= kMaxListedPieces;
  for (size_t i = 0; usable && i < id.piece_lengths->size(); ++i) {
    const uint64_t n = (*id.piece_lengths)[i];
    usable = n > 0 && n <= kMaxPieceBytes;
    listed += n;
  }
  if (usable && listed == payload_bytes) {
    h.flags |= kChunkFlagListedPieces;
    h.piece_bytes = 0;
    h.piece_count = static_cast<uint32_t>(id.piece_lengths->size());
    SetStarts(&h, *id.piece_lengths);
  } else {
    h.piece_bytes = PieceBytesFor(payload_bytes);
    h.piece_count = PieceCount(payload_bytes, h.piece_bytes);
  }
  if (encrypted) {
    h.piece_tags.resize(h.piece_count);
  } else {
    h.piece_sums.resize(h.piece_count);
  }
  return h;
}

uint64_t PayloadChecksum(std::span<const std::byte> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

uint64_t PayloadChecksum(GatherList payload) {
  if (payload.size() == 1) return PayloadChecksum(payload[0]);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& piece : payload) XXH3_64bits_update(&state, piece.data(), piece.size());
  return XXH3_64bits_digest(&state);
}

void SubList(GatherList list, uint64_t offset, uint64_t len, std::vector<std::span<const std::byte>>& out) {
  SubListImpl(list, offset, len, out);
}
void SubList(ScatterList list, uint64_t offset, uint64_t len, std::vector<std::span<std::byte>>& out) {
  SubListImpl(list, offset, len, out);
}

void EncodeChunkHeader(const ChunkHeader& h, std::span<std::byte, kChunkHeaderSize> out) {
  std::memset(out.data(), 0, out.size());
  std::byte* p = out.data();
  PutIdentity(h, p);
  if (h.version == kChunkFormatV1) {
    Put64(p + 96, h.payload_checksum);
    Put64(p + kV1FieldsEnd, XXH3_64bits(p, kV1FieldsEnd));
    return;
  }
  PutV2Fields(h, p);
  std::byte* t = p + kTableAt;
  if (h.encrypted()) {
    for (size_t i = 0; i < h.piece_tags.size() && i < kMaxPieces; ++i) {
      std::memcpy(t + i * kTagBytes, h.piece_tags[i].data(), kTagBytes);
    }
  } else {
    for (size_t i = 0; i < h.piece_sums.size() && i < kMaxPieces; ++i) Put64(t + i * 8, h.piece_sums[i]);
  }
  if (h.listed() && h.piece_count <= kMaxListedPieces) {
    for (uint32_t i = 0; i < h.piece_count; ++i) {
      Put32(t + h.piece_count * TableEntryBytes(h) + i * 4, static_cast<uint32_t>(h.PieceLength(i)));
    }
  }
  Put64(p + kV2ChecksumAt, XXH3_64bits(p, kV2ChecksumAt));
}

Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> in) {
  if (in.size() < kV1FieldsEnd + 8) return Status::Corruption("chunk header truncated");
  const std::byte* p = in.data();
  if (Get64(p) != kChunkMagic) return Status::Corruption("not a kvtier chunk (bad magic)");
  ChunkHeader h;
  h.version = Get32(p + 8);
  if (h.version == kChunkFormatV1) {
    if (Get64(p + kV1FieldsEnd) != XXH3_64bits(p, kV1FieldsEnd)) {
      return Status::Corruption("chunk header checksum mismatch");
    }
  } else {
    if (in.size() < kChunkHeaderSize) return Status::Corruption("chunk header truncated");
    if (Get64(p + kV2ChecksumAt) != XXH3_64bits(p, kV2ChecksumAt)) {
      return Status::Corruption("chunk header checksum mismatch");
    }
    if (h.version != kChunkFormatVersion) {
      return Status::VersionMismatch("chunk format version " + std::to_string(h.version) +
                                     " is not known to this build (knows 1 and 2)");
    }
  }
  if (Get32(p + 12) != kChunkHeaderSize) return Status::Corruption("unexpected chunk header size");
  GetIdentity(p, &h);
  if (h.payload_bytes > kMaxChunkPayload) return Status::Corruption("chunk payload length out of range");
  if (h.version == kChunkFormatV1) {
    h.payload_checksum = Get64(p + 96);
  } else {
    KVTIER_RETURN_IF_ERROR(DecodeV2(p, &h));
  }
  return h;
}

Status CheckByteRanges(std::span<const ByteRange> ranges, uint64_t payload_bytes, uint64_t dst_bytes) {
  uint64_t end = 0, total = 0;
  for (const ByteRange& r : ranges) {
    if (r.bytes == 0 || r.offset < end || r.offset > payload_bytes || r.bytes > payload_bytes - r.offset) {
      return Status::InvalidArgument("byte ranges must be non-empty, ascending, disjoint and within the chunk");
    }
    end = r.offset + r.bytes;
    total += r.bytes;
  }
  if (total != dst_bytes) {
    return Status::InvalidArgument("the destination holds " + std::to_string(dst_bytes) + " bytes, the ranges " +
                                   std::to_string(total));
  }
  return Status::OK();
}

Status CheckChunkHeader(const ChunkHeader& h, const ChunkId& expected, uint64_t stored_bytes) {
  if (h.id.ns != expected.ns) return Status::Corruption("chunk belongs to another namespace");
  if (!(h.id.key == expected.key)) return Status::Corruption("chunk stored under another key's name");
  if (expected.layout_fingerprint != 0 && h.id.layout_fingerprint != expected.layout_fingerprint) {
    return Status::Corruption("chunk has another layout");
  }
  if (stored_bytes < kChunkHeaderSize + h.payload_bytes) {
    return Status::Corruption("chunk truncated: " + std::to_string(stored_bytes) + " bytes stored, " +
                              std::to_string(kChunkHeaderSize + h.payload_bytes) + " expected");
  }
  return Status::OK();
}

Status CheckPiece(const ChunkHeader& h, uint32_t i, GatherList piece) {
  if (h.encrypted()) return Status::Corruption("chunk is encrypted: it needs a key to be verified");
  if (i >= h.pieces() || TotalBytes(piece) != h.PieceLength(i)) {
    return Status::Corruption("chunk piece length mismatch");
  }
  const uint64_t want = h.version == kChunkFormatV1 ? h.payload_checksum : h.piece_sums[i];
  if (PayloadChecksum(piece) != want) return Status::Corruption("chunk payload checksum mismatch");
  return Status::OK();
}

Status CheckPayload(const ChunkHeader& h, std::span<const std::byte> payload) {
  if (payload.size() != h.payload_bytes) return Status::Corruption("chunk payload length mismatch");
  for (uint32_t i = 0; i < h.pieces(); ++i) {
    const std::span<const std::byte> piece = payload.subspan(h.PieceOffset(i), h.PieceLength(i));
    KVTIER_RETURN_IF_ERROR(CheckPiece(h, i, GatherList(&piece, 1)));
  }
  return Status::OK();
}

std::array<std::byte, kPieceAadBytes> PieceAad(const ChunkHeader& h, uint32_t i) {
  std::array<std::byte, kPieceAadBytes> aad{};
  PutIdentity(h, aad.data());
  PutV2Fields(h, aad.data());
  Put32(aad.data() + kAuthenticatedHeaderBytes, i);
  return aad;
}

Status SealPiece(ChunkHeader* h, const NamespaceKey& key, uint32_t i, GatherList in, std::span<std::byte> out) {
  if (!h->encrypted() || i >= h->piece_count || TotalBytes(in) != h->PieceLength(i)) {
    return Status::Internal("SealPiece on a piece the header does not describe");
  }
  const auto aad = PieceAad(*h, i);
  return ChunkCipher::Seal(key, ChunkCipher::PieceNonce(h->nonce_base, i), aad, in, out, &h->piece_tags[i]);
}

Status OpenPiece(const ChunkHeader& h, const NamespaceKey& key, uint32_t i, GatherList in, ScatterList out) {
  if (!h.encrypted()) return Status::Corruption("chunk is not encrypted, but this tier requires encryption");
  if (i >= h.piece_count || TotalBytes(in) != h.PieceLength(i) || TotalBytes(out) != h.PieceLength(i)) {
    return Status::Corruption("chunk piece length mismatch");
  }
  const auto aad = PieceAad(h, i);
  return ChunkCipher::Open(key, ChunkCipher::PieceNonce(h.nonce_base, i), aad, in, out, h.piece_tags[i]);
}

}  // namespace kvtier::internal
