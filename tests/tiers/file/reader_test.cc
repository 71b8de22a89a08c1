// The chunk reader's memory and verification machinery (issue 11): bounce memory reused from the slab
// (no allocation per chunk), reads in place for aligned destinations and through the slab otherwise,
// pieces verified by the pool as they land (a flipped byte in any piece is Corruption and zeroes the
// destination), the in-flight budget admitting exactly k chunks for k payloads, and v1 chunks still
// read. Multi-piece chunks: 3 MiB payloads, three 1 MiB pieces.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "tiers/file/file_test_util.h"
#include "io/byte_budget.h"
#include "io/chunk_dir.h"
#include "io/chunk_io.h"
#include "io/filesystem.h"
#include "io/read_common.h"
#include "io/read_slab.h"
#include "testing/fault_fs.h"

namespace kvtier::internal {
namespace {

using kvtier::testing::FlipByte;
using kvtier::testing::KeyNo;
using kvtier::testing::PayloadFor;
using kvtier::testing::FsOp;
using kvtier::testing::TempDir;

constexpr uint32_t kTokens = 24576;                 // x 128 bytes per token = 3 MiB
constexpr uint64_t kPayload = uint64_t{kTokens} * 128;

struct Mode {
  bool uring;
  bool direct;
  unsigned verify_threads;
};

std::string ModeName(const ::testing::TestParamInfo<Mode>& info) {
  return std::string(info.param.uring ? "Uring" : "Preadv") + (info.param.direct ? "Direct" : "Buffered") +
         "Verify" + std::to_string(info.param.verify_threads);
}

// A destination of kPayload bytes at a chosen misalignment from a 2 MiB aligned base.
struct Dest {
  Dest(uint64_t bytes, size_t misalign) : mem(AlignedBuffer::Allocate(bytes + kChunkAlign, 2u << 20)) {
    span = {mem.data() + misalign, bytes};
    std::memset(mem.data(), 0xAB, mem.size());
  }
  bool AllZero() const {
    for (std::byte b : span) {
      if (b != std::byte{0}) return false;
    }
    return true;
  }
  AlignedBuffer mem;
  std::span<std::byte> span;
};

class ReaderTest : public ::testing::TestWithParam<Mode> {
 protected:
  ReaderTest() : ns_(Namespace::Make("test/model", kvtier::testing::SmallLayout(kTokens), "t").value()) {
    fs_ = *OpenPosixFileSystem(dir_.path());
  }

  bool DirectAccepted() {
    auto fd = fs_->OpenForRead(paths_.empty() ? "" : paths_[0], true);
    return fd.ok();
  }

  ReaderOptions Options(uint64_t inflight) const {
    ReaderOptions o;
    o.use_io_uring = GetParam().uring;
    o.direct_io = GetParam().direct;
    o.verify_threads = GetParam().verify_threads;
    o.max_inflight_bytes = inflight;
    o.fallback_threads = 3;
    return o;
  }

  std::unique_ptr<ChunkReader> Make(uint64_t inflight) {
    auto r = ChunkReader::Create(Options(inflight));
    if (GetParam().uring && r->engine().rfind("io_uring", 0) != 0) return nullptr;
    return r;
  }

  void WriteChunks(uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      const ChunkKey key = KeyNo(ns_, i);
      auto payload = PayloadFor(key, kPayload);
      const std::span<const std::byte> src(payload);
      const std::string path = "c" + std::to_string(i) + ".kvc";
      ASSERT_TRUE(WriteChunkFileAtomic(*fs_, path, ChunkId::Of(ns_, key), {&src, 1}, {}).ok());
      paths_.push_back(path);
    }
  }

  // Reads chunks [0, n) into `dests`, one ReadMany call; checks the bytes of each read that succeeded.
  std::vector<Status> ReadAll(ChunkReader& reader, std::vector<Dest>& dests) {
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < dests.size(); ++i) {
      reads.push_back({fs_.get(), paths_[i], ChunkId::Of(ns_, KeyNo(ns_, static_cast<uint32_t>(i))),
                       {&dests[i].span, 1}, Status::OK(), 0});
    }
    reader.ReadMany(reads);
    std::vector<Status> out;
    for (size_t i = 0; i < reads.size(); ++i) {
      if (reads[i].status.ok()) {
        const auto want = PayloadFor(KeyNo(ns_, static_cast<uint32_t>(i)), kPayload);
        EXPECT_EQ(std::memcmp(dests[i].span.data(), want.data(), kPayload), 0) << i;
      }
      out.push_back(reads[i].status);
    }
    return out;
  }

  static std::vector<Dest> Dests(size_t n, size_t misalign) {
    std::vector<Dest> d;
    for (size_t i = 0; i < n; ++i) d.emplace_back(kPayload, misalign);
    return d;
  }

  TempDir dir_;
  Namespace ns_;
  std::shared_ptr<FileSystem> fs_;
  std::vector<std::string> paths_;
};

// Two rounds of bounce reads: the second allocates nothing; every chunk went through reader memory.
TEST_P(ReaderTest, BounceMemoryIsReusedNotAllocatedPerChunk) {
  WriteChunks(6);
  ReaderOptions o = Options(2 * kPayload);
  o.read_into_destination = false;  // every chunk through reader memory, whatever the engine
  auto reader = ChunkReader::Create(o);
  if (GetParam().uring && reader->engine().rfind("io_uring", 0) != 0) GTEST_SKIP() << "kernel refuses io_uring";
  auto dests = Dests(6, 16);
  for (const Status& s : ReadAll(*reader, dests)) ASSERT_TRUE(s.ok()) << s.ToString();
  const ChunkReader::Stats first = reader->stats();
  for (int round = 0; round < 3; ++round) {
    for (const Status& s : ReadAll(*reader, dests)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  const ChunkReader::Stats after = reader->stats();
  // 24 chunks read, at most two at a time (the budget): at most one buffer per chunk in flight, ever.
  EXPECT_GT(first.buffer_allocations, 0u);
  EXPECT_LE(after.buffer_allocations, 2u);
  if (GetParam().uring) {
    EXPECT_EQ(after.buffer_allocations, first.buffer_allocations);
  }
  if (GetParam().uring) {
    EXPECT_EQ(after.slab_misses, 0u);
    EXPECT_GT(after.slab_bytes, 0u);
    EXPECT_LE(after.slab_bytes, BounceMemoryCap(2 * kPayload));
    // Registered with the ring: the slab is read with READ_FIXED.
    EXPECT_GT(after.fixed_reads, 0u);
    EXPECT_EQ(after.bounce_chunks, 24u);
    EXPECT_EQ(after.in_place_chunks, 0u);
  }
}

TEST_P(ReaderTest, AlignedDestinationsAreReadInPlaceOthersBounce) {
  if (!GetParam().uring) GTEST_SKIP() << "the preadv engine always reads through its buffers";
  WriteChunks(4);
  auto reader = Make(256ull << 20);
  if (!reader) GTEST_SKIP() << "kernel refuses io_uring";
  auto aligned = Dests(4, 0);
  for (const Status& s : ReadAll(*reader, aligned)) ASSERT_TRUE(s.ok()) << s.ToString();
  ChunkReader::Stats s = reader->stats();
  EXPECT_EQ(s.in_place_chunks, 4u);
  EXPECT_EQ(s.bounce_chunks, 0u);
  EXPECT_EQ(s.slab_bytes, 0u);  // never needed: nothing allocated for bounces
  auto misaligned = Dests(4, 512);
  for (const Status& st : ReadAll(*reader, misaligned)) ASSERT_TRUE(st.ok()) << st.ToString();
  s = reader->stats();
  if (GetParam().direct && DirectAccepted()) {
    EXPECT_EQ(s.bounce_chunks, 4u);  // O_DIRECT cannot land in memory that is not 4 KiB aligned
  } else {
    EXPECT_EQ(s.in_place_chunks, 8u);  // buffered reads land anywhere
  }
  ReaderOptions o = Options(256ull << 20);
  o.read_into_destination = false;
  auto bouncing = ChunkReader::Create(o);
  for (const Status& st : ReadAll(*bouncing, aligned)) ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(bouncing->stats().bounce_chunks, 4u);
  EXPECT_EQ(bouncing->stats().in_place_chunks, 0u);
}

// A flipped byte in any one piece of a three-piece chunk is Corruption, whichever thread verifies it,
// and the destination is zeroed; the neighbours read fine.
TEST_P(ReaderTest, FlippedByteInAnyPieceIsCorruptionAndZeroes) {
  WriteChunks(5);
  const uint64_t flips[] = {0, (1u << 20) + 5, (2u << 20) + 77, kPayload - 1};
  for (int c = 0; c < 4; ++c) FlipByte(dir_.path() + "/" + paths_[c], kChunkHeaderSize + flips[c]);
  for (size_t misalign : {size_t{0}, size_t{16}}) {
    auto reader = Make(2 * kPayload);
    if (!reader) GTEST_SKIP() << "kernel refuses io_uring";
    auto dests = Dests(5, misalign);
    const auto st = ReadAll(*reader, dests);
    for (int c = 0; c < 4; ++c) {
      EXPECT_TRUE(st[c].IsCorruption()) << c << " " << st[c].ToString();
      EXPECT_TRUE(dests[c].AllZero()) << c;
    }
    EXPECT_TRUE(st[4].ok()) << st[4].ToString();
    if (GetParam().uring && GetParam().verify_threads > 0) {
      EXPECT_GT(reader->stats().verify_tasks, 0u);
    }
  }
}

// Short reads split pieces at odd offsets; every byte still lands once and is verified.
TEST_P(ReaderTest, ShortReadsStillVerifyEveryPiece) {
  WriteChunks(3);
  auto fault = std::make_shared<kvtier::testing::FaultFileSystem>(fs_);
  const size_t rule = fault->Add({.op = FsOp::kRead, .short_read = true, .times = 7});
  fs_ = fault;
  auto reader = Make(4 * kPayload);
  if (!reader) GTEST_SKIP() << "kernel refuses io_uring";
  auto dests = Dests(3, 0);
  for (const Status& s : ReadAll(*reader, dests)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(fault->Fired(rule), 7u);
  const size_t eio = fault->Add({.op = FsOp::kRead, .path = "c1", .error = EIO, .times = 1});
  auto again = Dests(3, 0);
  const auto st = ReadAll(*reader, again);
  EXPECT_EQ(fault->Fired(eio), 1u);
  EXPECT_EQ(st[1].code(), Code::kIOError) << st[1].ToString();
  EXPECT_TRUE(again[1].AllZero());
  EXPECT_TRUE(st[0].ok() && st[2].ok());
}

// A v1 chunk (one checksum over the whole payload) is read and verified by both paths.
TEST_P(ReaderTest, V1ChunksStayReadable) {
  const ChunkKey key0 = KeyNo(ns_, 0);
  for (uint32_t i = 0; i < 2; ++i) {
    const ChunkKey key = KeyNo(ns_, i);
    const auto payload = PayloadFor(key, kPayload);
    ChunkHeader h;
    h.version = kChunkFormatV1;
    h.id = ChunkId::Of(ns_, key);
    h.payload_bytes = kPayload;
    h.payload_checksum = PayloadChecksum(std::span<const std::byte>(payload));
    std::vector<std::byte> file(StoredChunkBytes(kPayload));
    EncodeChunkHeader(h, std::span<std::byte, kChunkHeaderSize>(file.data(), kChunkHeaderSize));
    std::memcpy(file.data() + kChunkHeaderSize, payload.data(), kPayload);
    const std::string path = "v1-" + std::to_string(i) + ".kvc";
    std::ofstream(dir_.path() + "/" + path, std::ios::binary)
        .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
    paths_.push_back(path);
  }
  (void)key0;
  for (size_t misalign : {size_t{0}, size_t{16}}) {
    auto reader = Make(256ull << 20);
    if (!reader) GTEST_SKIP() << "kernel refuses io_uring";
    auto dests = Dests(2, misalign);
    for (const Status& s : ReadAll(*reader, dests)) EXPECT_TRUE(s.ok()) << s.ToString();
  }
  FlipByte(dir_.path() + "/" + paths_[1], kChunkHeaderSize + (2u << 20));
  auto reader = Make(256ull << 20);
  auto dests = Dests(2, 0);
  const auto st = ReadAll(*reader, dests);
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_TRUE(st[1].IsCorruption()) << st[1].ToString();
  EXPECT_TRUE(dests[1].AllZero());
}

// A budget of k payloads runs k chunks at once: the header is not charged.
TEST_P(ReaderTest, BudgetOfKPayloadsRunsKChunks) {
  WriteChunks(12);
  auto opened = OpenChunk(*fs_, paths_[0], kPayload, false);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(BudgetCharge(*opened), kPayload);
  ByteBudget budget(4 * kPayload);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(budget.TryAcquire(BudgetCharge(*opened))) << i;
  EXPECT_FALSE(budget.TryAcquire(BudgetCharge(*opened)));
  if (!GetParam().uring) return;  // the preadv engine's concurrency depends on its threads' timing
  for (uint64_t k : {1u, 4u}) {
    auto reader = Make(k * kPayload);
    if (!reader) GTEST_SKIP() << "kernel refuses io_uring";
    auto dests = Dests(12, 0);
    for (const Status& s : ReadAll(*reader, dests)) ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(reader->stats().max_chunks_in_flight, k);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ReaderTest,
                         ::testing::Values(Mode{true, true, 0}, Mode{true, true, 2}, Mode{true, false, 2},
                                           Mode{false, true, 2}, Mode{false, false, 0}),
                         ModeName);

TEST(ReadSlabTest, RegionsAreReusedAndCoalesced) {
  ReadSlab slab(8u << 20);
  auto a = slab.Allocate(1u << 20);
  auto b = slab.Allocate(1u << 20);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(slab.segments(), 1u);  // both fit the first 2 MiB segment
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % kChunkAlign, 0u);
  slab.Free(*a);
  slab.Free(*b);
  auto c = slab.Allocate(2u << 20);  // the two freed halves coalesced
  ASSERT_TRUE(c);
  EXPECT_EQ(slab.segments(), 1u);
  auto d = slab.Allocate(6u << 20);
  ASSERT_TRUE(d);
  EXPECT_EQ(slab.segments(), 2u);
  EXPECT_FALSE(slab.Allocate(1u << 20));  // at the cap
  slab.Free(*c);
  slab.Free(*d);
  EXPECT_EQ(slab.bytes(), 8u << 20);
}

}  // namespace
}  // namespace kvtier::internal
