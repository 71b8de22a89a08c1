#include "core/chunk_format.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace kvtier::internal {
namespace {

ChunkHeader SampleHeader(std::span<const std::byte> payload) {
  ChunkHeader h;
  for (size_t i = 0; i < 32; ++i) {
    h.id.ns[i] = static_cast<uint8_t>(i);
    h.id.key.bytes[i] = static_cast<uint8_t>(0xA0 + i);
  }
  h.id.layout_fingerprint = 0x1122334455667788ull;
  h.payload_bytes = payload.size();
  h.payload_checksum = PayloadChecksum(payload);
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
  EXPECT_EQ(d->version, kChunkFormatVersion);
  EXPECT_EQ(d->id, h.id);
  EXPECT_EQ(d->payload_bytes, 1000u);
  EXPECT_EQ(d->payload_checksum, h.payload_checksum);
  EXPECT_TRUE(CheckChunkHeader(*d, h.id, StoredChunkBytes(1000)).ok());
  EXPECT_TRUE(CheckPayload(*d, payload).ok());
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
  ChunkHeader h = SampleHeader(Payload(8));
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

}  // namespace
}  // namespace kvtier::internal
