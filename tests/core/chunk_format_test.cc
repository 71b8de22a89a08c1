#include "core/chunk_format.h"

#include <gtest/gtest.h>

#include "core/xxh3.h"

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

ChunkId SampleId() {
  ChunkId id;
  for (size_t i = 0; i < 32; ++i) {
    id.ns[i] = static_cast<uint8_t>(i);
    id.key.bytes[i] = static_cast<uint8_t>(0xA0 + i);
  }
  id.layout_fingerprint = 0x1122334455667788ull;
  return id;
}

// A v1 header, as builds before format v2 wrote it (v1 is read, never written, by this build).
ChunkHeader SampleHeader(std::span<const std::byte> payload) {
  ChunkHeader h;
  h.version = kChunkFormatV1;
  h.id = SampleId();
  h.payload_bytes = payload.size();
  h.payload_checksum = PayloadChecksum(payload);
  return h;
}

// A plain v2 header with its piece sums.
ChunkHeader SampleV2Header(std::span<const std::byte> payload) {
  ChunkHeader h = NewChunkHeader(SampleId(), payload.size(), /*encrypted=*/false);
  for (uint32_t i = 0; i < h.piece_count; ++i) {
    h.piece_sums[i] = PayloadChecksum(payload.subspan(h.PieceOffset(i), h.PieceLength(i)));
  }
  return h;
}

std::vector<std::byte> Payload(size_t n) {
  std::vector<std::byte> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(i * 7 + 3);
  return p;
}

struct Encoded {
  alignas(8) std::array<std::byte, kChunkHeaderSize> bytes;
};

TEST(ChunkFormatTest, HeaderRoundTrip) {
  const auto payload = Payload(1000);
  const ChunkHeader h = SampleHeader(payload);
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  auto d = DecodeChunkHeader(e.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->id, h.id);
  EXPECT_EQ(d->payload_bytes, 1000u);
  EXPECT_EQ(d->payload_checksum, h.payload_checksum);
  EXPECT_TRUE(CheckChunkHeader(*d, h.id, StoredChunkBytes(1000)).ok());
  EXPECT_TRUE(CheckPayload(*d, payload).ok());
  EXPECT_EQ(d->version, kChunkFormatV1);
  // The magic reads "TVTCHNK1" in file order.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(e.bytes.data()), 8), "TVTCHNK1");
}

TEST(ChunkFormatTest, EveryHeaderByteIsProtected) {
  const auto payload = Payload(64);
  Encoded e;
  EncodeChunkHeader(SampleHeader(payload), e.bytes);
  for (size_t i = 0; i < 112; ++i) {  // every field and the header checksum itself
    Encoded bad = e;
    bad.bytes[i] ^= std::byte{0x01};
    auto d = DecodeChunkHeader(bad.bytes);
    EXPECT_FALSE(d.ok()) << "flipped byte " << i;
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), Code::kCorruption) << "flipped byte " << i;
    }
  }
}

TEST(ChunkFormatTest, TruncatedHeader) {
  Encoded e;
  EncodeChunkHeader(SampleHeader(Payload(8)), e.bytes);
  EXPECT_EQ(DecodeChunkHeader(std::span<const std::byte>(e.bytes.data(), 100)).status().code(),
            Code::kCorruption);
  EXPECT_EQ(DecodeChunkHeader({}).status().code(), Code::kCorruption);
}

TEST(ChunkFormatTest, UnknownVersionIsVersionMismatch) {
  ChunkHeader h = SampleV2Header(Payload(8));
  h.version = kChunkFormatVersion + 1;
  Encoded e;
  EncodeChunkHeader(h, e.bytes);  // a newer writer: a valid header checksum over another version
  EXPECT_EQ(DecodeChunkHeader(e.bytes).status().code(), Code::kVersionMismatch);
}

TEST(ChunkFormatTest, AbsurdLengthIsCorruption) {
  ChunkHeader h = SampleHeader(Payload(8));
  h.payload_bytes = 5ull << 30;
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  EXPECT_EQ(DecodeChunkHeader(e.bytes).status().code(), Code::kCorruption);
}

TEST(ChunkFormatTest, HeaderMismatchWithRequestedChunk) {
  const auto payload = Payload(100);
  const ChunkHeader h = SampleHeader(payload);
  ChunkId other_ns = h.id, other_key = h.id, other_layout = h.id, any_layout = h.id;
  other_ns.ns[3] ^= 1;
  other_key.key.bytes[31] ^= 1;
  other_layout.layout_fingerprint ^= 1;
  any_layout.layout_fingerprint = 0;  // only the name is known: layout not checked
  const uint64_t stored = StoredChunkBytes(100);
  EXPECT_TRUE(CheckChunkHeader(h, other_ns, stored).IsCorruption());
  EXPECT_TRUE(CheckChunkHeader(h, other_key, stored).IsCorruption());
  EXPECT_TRUE(CheckChunkHeader(h, other_layout, stored).IsCorruption());
  EXPECT_TRUE(CheckChunkHeader(h, any_layout, stored).ok());
  EXPECT_TRUE(CheckChunkHeader(h, h.id, kChunkHeaderSize + 99).IsCorruption());  // truncated
  EXPECT_TRUE(CheckChunkHeader(h, h.id, kChunkHeaderSize + 100).ok());
}

TEST(ChunkFormatTest, PayloadCorruptionAndLength) {
  auto payload = Payload(4096);
  const ChunkHeader h = SampleHeader(payload);
  EXPECT_TRUE(CheckPayload(h, std::span<const std::byte>(payload.data(), 4095)).IsCorruption());
  payload[1234] ^= std::byte{0x80};
  EXPECT_TRUE(CheckPayload(h, payload).IsCorruption());
}

TEST(ChunkFormatTest, GatherChecksumEqualsContiguous) {
  const auto payload = Payload(10000);
  const std::span<const std::byte> all(payload);
  const std::span<const std::byte> pieces[] = {all.subspan(0, 1), all.subspan(1, 4999),
                                               all.subspan(5000, 0), all.subspan(5000)};
  EXPECT_EQ(PayloadChecksum(GatherList(pieces)), PayloadChecksum(all));
  EXPECT_EQ(PayloadChecksum(GatherList(pieces + 1, 1)), PayloadChecksum(all.subspan(1, 4999)));
}

TEST(ChunkFormatTest, StoredSizeIsAligned) {
  EXPECT_EQ(StoredChunkBytes(0), kChunkHeaderSize);
  EXPECT_EQ(StoredChunkBytes(1), kChunkHeaderSize + kChunkAlign);
  EXPECT_EQ(StoredChunkBytes(4096), kChunkHeaderSize + 4096);
  EXPECT_EQ(StoredChunkBytes(4097), kChunkHeaderSize + 8192);
}

TEST(ChunkFormatV2Test, WritesVersion2) { EXPECT_EQ(ChunkHeader().version, 2u); }

TEST(ChunkFormatV2Test, PlainRoundTripAndPieceTable) {
  const auto payload = Payload(3 * kMinPieceBytes + 100);
  const ChunkHeader h = SampleV2Header(payload);
  ASSERT_EQ(h.piece_bytes, kMinPieceBytes);
  ASSERT_EQ(h.piece_count, 4u);
  EXPECT_EQ(h.PieceLength(3), 100u);
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(e.bytes.data()), 8), "TVTCHNK1");
  auto d = DecodeChunkHeader(e.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->version, 2u);
  EXPECT_FALSE(d->encrypted());
  EXPECT_EQ(d->piece_sums, h.piece_sums);
  EXPECT_EQ(d->id, h.id);
  EXPECT_TRUE(CheckPayload(*d, payload).ok());
  for (uint32_t i = 0; i < 4; ++i) {  // each piece verifies on its own
    const auto piece = std::span<const std::byte>(payload).subspan(d->PieceOffset(i), d->PieceLength(i));
    EXPECT_TRUE(CheckPiece(*d, i, GatherList(&piece, 1)).ok()) << i;
  }
  auto bad = payload;
  bad[2 * kMinPieceBytes + 5] ^= std::byte{1};  // piece 2 only
  const auto b = std::span<const std::byte>(bad);
  for (uint32_t i = 0; i < 4; ++i) {
    const auto piece = b.subspan(d->PieceOffset(i), d->PieceLength(i));
    EXPECT_EQ(CheckPiece(*d, i, GatherList(&piece, 1)).ok(), i != 2) << i;
  }
  EXPECT_TRUE(CheckPayload(*d, bad).IsCorruption());
}

TEST(ChunkFormatV2Test, PieceSizeGrowsSoTheTableAlwaysFits) {
  EXPECT_EQ(PieceBytesFor(0), kMinPieceBytes);
  EXPECT_EQ(PieceBytesFor(uint64_t{kMaxPieces} * kMinPieceBytes), kMinPieceBytes);
  EXPECT_EQ(PieceBytesFor(uint64_t{kMaxPieces} * kMinPieceBytes + 1), 2 * kMinPieceBytes);
  EXPECT_EQ(PieceBytesFor(kMaxChunkPayload), 32u << 20);
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{32} << 20, kMaxChunkPayload - 1, kMaxChunkPayload}) {
    const ChunkHeader h = NewChunkHeader(SampleId(), n, true);
    EXPECT_LE(h.piece_count, kMaxPieces);
    EXPECT_LE(kAuthenticatedHeaderBytes + h.piece_count * kTagBytes, kChunkHeaderSize - 8);
    EXPECT_EQ(h.PieceOffset(h.piece_count - 1) + h.PieceLength(h.piece_count - 1), n);
  }
  EXPECT_EQ(NewChunkHeader(SampleId(), 0, false).piece_count, 1u);  // an empty payload: one empty piece
}

TEST(ChunkFormatV2Test, EveryHeaderByteIsProtected) {
  Encoded e;
  EncodeChunkHeader(SampleV2Header(Payload(3 * kMinPieceBytes)), e.bytes);
  for (size_t i = 0; i < kChunkHeaderSize; ++i) {  // fields, table, padding and the checksum
    Encoded bad = e;
    bad.bytes[i] ^= std::byte{0x01};
    auto d = DecodeChunkHeader(bad.bytes);
    ASSERT_FALSE(d.ok()) << "flipped byte " << i;
    EXPECT_TRUE(d.status().IsCorruption() || d.status().code() == Code::kVersionMismatch) << i;
  }
}

// Rewrites a v2 header's checksum, as someone with write access could: only the checks behind the
// checksum remain.
void Reseal(Encoded& e) {
  const uint64_t sum = PayloadChecksum(std::span<const std::byte>(e.bytes.data(), 4088));
  for (int i = 0; i < 8; ++i) e.bytes[4088 + i] = static_cast<std::byte>(sum >> (8 * i));
}

TEST(ChunkFormatV2Test, GeometryIsCheckedBehindTheChecksum) {
  Encoded good;
  EncodeChunkHeader(SampleV2Header(Payload(5000)), good.bytes);
  auto mutate = [&](size_t at, uint8_t v) {
    Encoded e = good;
    e.bytes[at] = std::byte{v};
    Reseal(e);
    return DecodeChunkHeader(e.bytes).status();
  };
  EXPECT_TRUE(mutate(96, 2).IsCorruption());    // unknown flag
  EXPECT_TRUE(mutate(100, 0x01).IsCorruption()); // piece size not a power of two
  EXPECT_TRUE(mutate(104, 2).IsCorruption());   // piece count disagrees with the payload
  EXPECT_TRUE(mutate(108, 1).IsCorruption());   // reserved
  EXPECT_TRUE(mutate(112, 1).IsCorruption());   // a nonce in a plain chunk
  EXPECT_TRUE(mutate(2000, 1).IsCorruption());  // padding after the table
  EXPECT_TRUE(DecodeChunkHeader(std::span<const std::byte>(good.bytes.data(), 4000)).status().IsCorruption());
}

TEST(ChunkFormatV2Test, EncryptedRoundTrip) {
  std::vector<std::byte> material(32, std::byte{7});
  auto cipher = ChunkCipher::FromKeyMaterial(material);
  ASSERT_TRUE(cipher.ok());
  const auto payload = Payload(kMinPieceBytes + 77);
  ChunkHeader h = NewChunkHeader(SampleId(), payload.size(), true);
  h.nonce_base = ChunkCipher::RandomNonceBase().value();
  NamespaceKey key;
  ASSERT_TRUE((*cipher)->DeriveKey(h.id.ns, &key).ok());
  std::vector<std::byte> sealed(payload.size());
  const std::span<const std::byte> all(payload);
  for (uint32_t i = 0; i < h.piece_count; ++i) {
    const auto in = all.subspan(h.PieceOffset(i), h.PieceLength(i));
    ASSERT_TRUE(SealPiece(&h, key, i, GatherList(&in, 1),
                          std::span(sealed).subspan(h.PieceOffset(i), h.PieceLength(i))).ok());
  }
  EXPECT_NE(sealed, payload);
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  auto d = DecodeChunkHeader(e.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->encrypted());
  EXPECT_TRUE(CheckPayload(*d, sealed).IsCorruption());  // no keyless check passes ciphertext
  auto open_all = [&](const ChunkHeader& hh, const NamespaceKey& k, std::vector<std::byte> data) {
    for (uint32_t i = 0; i < hh.piece_count; ++i) {
      const std::span<std::byte> io = std::span(data).subspan(hh.PieceOffset(i), hh.PieceLength(i));
      const std::span<const std::byte> in = io;
      Status s = OpenPiece(hh, k, i, GatherList(&in, 1), ScatterList(&io, 1));
      if (!s.ok()) return std::make_pair(s, data);
    }
    return std::make_pair(Status::OK(), data);
  };
  auto [ok, plain] = open_all(*d, key, sealed);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(plain, payload);
  // Another namespace's key, a flipped ciphertext byte, a changed header field: all rejected.
  ChunkId other = SampleId();
  other.ns[0] ^= 1;
  NamespaceKey other_key;
  ASSERT_TRUE((*cipher)->DeriveKey(other.ns, &other_key).ok());
  EXPECT_TRUE(open_all(*d, other_key, sealed).first.IsCorruption());
  auto flipped = sealed;
  flipped[10] ^= std::byte{1};
  EXPECT_TRUE(open_all(*d, key, flipped).first.IsCorruption());
  ChunkHeader moved = *d;
  moved.id.layout_fingerprint ^= 1;  // associated data
  EXPECT_TRUE(open_all(moved, key, sealed).first.IsCorruption());
  ChunkHeader swapped = *d;
  std::swap(swapped.piece_tags[0], swapped.piece_tags[1]);
  EXPECT_TRUE(open_all(swapped, key, sealed).first.IsCorruption());
}

TEST(ChunkCipherTest, KeysDifferPerNamespaceAndNoncesPerPiece) {
  std::vector<std::byte> material(32, std::byte{9});
  auto cipher = ChunkCipher::FromKeyMaterial(material).value();
  Digest a{}, b{};
  b[31] = 1;
  NamespaceKey ka, kb, ka2;
  ASSERT_TRUE(cipher->DeriveKey(a, &ka).ok());
  ASSERT_TRUE(cipher->DeriveKey(b, &kb).ok());
  ASSERT_TRUE(cipher->DeriveKey(a, &ka2).ok());
  EXPECT_NE(std::memcmp(ka.data(), kb.data(), kCipherKeyBytes), 0);
  EXPECT_EQ(std::memcmp(ka.data(), ka2.data(), kCipherKeyBytes), 0);
  const Nonce base = ChunkCipher::RandomNonceBase().value();
  EXPECT_NE(base, ChunkCipher::RandomNonceBase().value());
  EXPECT_NE(ChunkCipher::PieceNonce(base, 0), ChunkCipher::PieceNonce(base, 1));
  EXPECT_EQ(ChunkCipher::PieceNonce(base, 0), base);
  EXPECT_FALSE(ChunkCipher::FromKeyMaterial(std::vector<std::byte>(32)).ok());  // all zero
  EXPECT_FALSE(ChunkCipher::FromKeyMaterial(std::vector<std::byte>(31, std::byte{1})).ok());
}

// Listed pieces (flag bit 1): the lengths a grouped layout's writer chose, round-tripped; every way the
// list can disagree with the payload is Corruption.
ChunkHeader ListedHeader(std::span<const std::byte> payload, std::vector<uint64_t> lengths) {
  ChunkId id = SampleId();
  id.piece_lengths = &lengths;
  ChunkHeader h = NewChunkHeader(id, payload.size(), /*encrypted=*/false);
  for (uint32_t i = 0; i < h.piece_count; ++i) {
    h.piece_sums[i] = PayloadChecksum(payload.subspan(h.PieceOffset(i), h.PieceLength(i)));
  }
  return h;
}

TEST(ChunkFormatTest, ListedPiecesRoundTrip) {
  const auto payload = Payload(1000);
  const ChunkHeader h = ListedHeader(payload, {100, 300, 1, 599});
  ASSERT_TRUE(h.listed());
  EXPECT_EQ(h.piece_bytes, 0u);
  EXPECT_EQ(h.pieces(), 4u);
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  auto d = DecodeChunkHeader(e.bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->listed());
  const uint64_t starts[] = {0, 100, 400, 401, 1000};
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(d->PieceOffset(i), starts[i]);
    EXPECT_EQ(d->PieceLength(i), starts[i + 1] - starts[i]);
  }
  EXPECT_EQ(d->PieceAt(0), 0u);
  EXPECT_EQ(d->PieceAt(99), 0u);
  EXPECT_EQ(d->PieceAt(100), 1u);
  EXPECT_EQ(d->PieceAt(400), 2u);
  EXPECT_EQ(d->PieceAt(401), 3u);
  EXPECT_EQ(d->PieceAt(999), 3u);
  EXPECT_TRUE(CheckPayload(*d, payload).ok());
  auto bad = payload;
  bad[400] ^= std::byte{1};  // the one-byte piece
  EXPECT_TRUE(CheckPayload(*d, bad).IsCorruption());
}

TEST(ChunkFormatTest, ListsThatDoNotDescribeThePayloadAreNotUsed) {
  const auto payload = Payload(1000);
  for (const std::vector<uint64_t>& lengths : std::vector<std::vector<uint64_t>>{{100, 300}, {1000, 0}, {}, std::vector<uint64_t>(193, 1)}) {
    const ChunkHeader h = ListedHeader(payload, lengths);
    EXPECT_FALSE(h.listed()) << lengths.size();  // the writer falls back to power-of-two pieces
    EXPECT_EQ(h.piece_bytes, kMinPieceBytes);
  }
}

TEST(ChunkFormatTest, CorruptListedLengthsAreCorruption) {
  const auto payload = Payload(1000);
  const ChunkHeader h = ListedHeader(payload, {100, 900});
  Encoded e;
  EncodeChunkHeader(h, e.bytes);
  const size_t lengths_at = kAuthenticatedHeaderBytes + 2 * 8;
  // Each edit keeps the header checksum right, so only the geometry checks can catch it.
  const auto reseal = [](Encoded& x) {
    const uint64_t sum = XXH3_64bits(x.bytes.data(), 4088);
    for (int i = 0; i < 8; ++i) x.bytes[4088 + i] = static_cast<std::byte>(sum >> (8 * i));
  };
  for (uint32_t second : {899u, 901u, 0u, (1u << 30) + 1}) {
    Encoded x = e;
    for (int i = 0; i < 4; ++i) x.bytes[lengths_at + 4 + i] = static_cast<std::byte>(second >> (8 * i));
    reseal(x);
    EXPECT_TRUE(DecodeChunkHeader(x.bytes).status().IsCorruption()) << second;
  }
  Encoded with_size = e;  // a listed chunk has no piece size
  with_size.bytes[100] = std::byte{1};
  reseal(with_size);
  EXPECT_TRUE(DecodeChunkHeader(with_size.bytes).status().IsCorruption());
  Encoded trailing = e;  // bytes after the lengths
  trailing.bytes[lengths_at + 8] = std::byte{1};
  reseal(trailing);
  EXPECT_TRUE(DecodeChunkHeader(trailing.bytes).status().IsCorruption());
}

}  // namespace
}  // namespace kvtier::internal
