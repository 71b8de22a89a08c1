#include "tiers/fs/fs_tier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "core/chunk_format.h"
#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/pool_layout.h"
#include "io/dir_names.h"

namespace kvtier::internal {
namespace {

using fstest::OnePiece;
using fstest::PayloadFor;

class FsTierTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  std::unique_ptr<Tier> Open(const std::string& options = "") {
    auto url = TierUrl::Parse("fs://" + dir_.path() + "/pool" + options);
    EXPECT_TRUE(url.ok());
    auto t = OpenFsTier(*url);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  ChunkId Id(size_t i) const { return ChunkId::Of(ns_, keys_[i]); }
  size_t Bytes() const { return ns_.layout().BytesPerChunk(); }
  Status PutKey(Tier& t, size_t i) {
    auto data = PayloadFor(keys_[i], Bytes());
    return t.Put(Id(i), OnePiece(data).src());
  }
  std::string PathOf(size_t i) const { return PoolChunkPathForTesting(dir_.path() + "/pool", Id(i)); }

  fstest::TempDir dir_;
  Namespace ns_ = fstest::TestNamespace();
  std::vector<ChunkKey> keys_ = fstest::TestKeys(ns_, 8);
};

TEST_F(FsTierTest, PutGetRoundTripAndCapabilities) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  const TierCapabilities caps = tier->capabilities();
  EXPECT_TRUE(caps.persistent);
  EXPECT_TRUE(caps.shared);
  EXPECT_FALSE(caps.in_memory);
  EXPECT_FALSE(tier->Contains(Id(0)));
  ASSERT_TRUE(PutKey(*tier, 0).ok());
  EXPECT_TRUE(tier->Contains(Id(0)));  // our own Put clears the negative entry
  std::vector<std::byte> out(Bytes());
  ASSERT_TRUE(tier->Get(Id(0), OnePiece(out).dst()).ok());
  EXPECT_EQ(out, PayloadFor(keys_[0], Bytes()));
  const TierStats st = tier->Stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(st.bytes_read, Bytes());
}

TEST_F(FsTierTest, AnotherInstanceSeesChunksAfterNegativeTtl) {
  auto writer = Open();
  auto reader = Open("?neg_ttl_ms=0");
  auto cached = Open("?neg_ttl_ms=600000");
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(cached, nullptr);
  EXPECT_FALSE(reader->Contains(Id(1)));
  EXPECT_FALSE(cached->Contains(Id(1)));
  ASSERT_TRUE(PutKey(*writer, 1).ok());
  EXPECT_TRUE(reader->Contains(Id(1)));   // nothing cached: the filesystem is asked each time
  EXPECT_FALSE(cached->Contains(Id(1)));  // a remembered miss, within its ttl
  std::vector<std::byte> out(Bytes());
  EXPECT_TRUE(cached->Get(Id(1), OnePiece(out).dst()).IsNotFound());
  ASSERT_TRUE(reader->Get(Id(1), OnePiece(out).dst()).ok());
  EXPECT_EQ(out, PayloadFor(keys_[1], Bytes()));
}

// A hit is remembered for pos_ttl_ms; one that went stale (another host removed the chunk) costs one
// NotFound read, which forgets it. pos_ttl_ms=0 asks the filesystem every time.
TEST_F(FsTierTest, RemembersHitsBrieflyAndAStaleOneCostsOneMiss) {
  auto writer = Open();
  auto cached = Open("?pos_ttl_ms=600000");
  auto uncached = Open("?pos_ttl_ms=0&neg_ttl_ms=0");
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(uncached, nullptr);
  ASSERT_TRUE(PutKey(*writer, 4).ok());
  EXPECT_TRUE(cached->Contains(Id(4)));
  EXPECT_TRUE(uncached->Contains(Id(4)));
  ASSERT_TRUE(std::filesystem::remove(PathOf(4)));  // behind both tiers' backs
  EXPECT_FALSE(uncached->Contains(Id(4)));
  EXPECT_TRUE(cached->Contains(Id(4))) << "a remembered hit, within its ttl";
  std::vector<std::byte> out(Bytes());
  EXPECT_TRUE(cached->Get(Id(4), OnePiece(out).dst()).IsNotFound());  // verified on load: a miss
  EXPECT_FALSE(cached->Contains(Id(4))) << "the failed read forgot the hit";
  bool present[2] = {true, true};
  const ChunkId ids[2] = {Id(4), Id(5)};
  cached->ContainsMany(ids, present);
  EXPECT_FALSE(present[0]);
  EXPECT_FALSE(present[1]);
  EXPECT_EQ(ParseFsTierOptions(*TierUrl::Parse("fs:///x?pos_ttl_ms=86400001")).status().code(),
            Code::kInvalidArgument);
}

TEST_F(FsTierTest, ChunksSurviveReopen) {
  {
    auto tier = Open();
    ASSERT_TRUE(PutKey(*tier, 2).ok());
  }
  auto tier = Open("?create=false");
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> out(Bytes());
  ASSERT_TRUE(tier->Get(Id(2), OnePiece(out).dst()).ok());
  EXPECT_EQ(out, PayloadFor(keys_[2], Bytes()));
}

TEST_F(FsTierTest, TemporaryFilesAreInvisible) {
  auto tier = Open("?neg_ttl_ms=0");
  const std::string path = PathOf(3);
  ASSERT_TRUE(PutKey(*tier, 3).ok());
  ASSERT_TRUE(tier->Remove(Id(3)).ok());
  // A live writer's temporary, and one of an earlier build's writers.
  const std::filesystem::path p(path);
  std::ofstream((p.parent_path() / MakeTempName(p.filename().string())).string()) << "half a chunk";
  std::ofstream(path + ".tmp.999.1.2") << "half a chunk";
  EXPECT_FALSE(tier->Contains(Id(3)));
  size_t listed = 0;
  ASSERT_TRUE(tier->List([&](const ChunkInfo&) { return ++listed, true; }).ok());
  EXPECT_EQ(listed, 0u);
}

TEST_F(FsTierTest, CorruptChunkIsAMissAndRemoved) {
  auto tier = Open("?neg_ttl_ms=0");
  ASSERT_TRUE(PutKey(*tier, 4).ok());
  {
    std::fstream f(PathOf(4), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kChunkHeaderSize + 100));
    f.put('\x5a').put('\xa5');
  }
  std::vector<std::byte> out(Bytes());
  EXPECT_TRUE(tier->Get(Id(4), OnePiece(out).dst()).IsCorruption());
  EXPECT_FALSE(tier->Contains(Id(4)));
  EXPECT_EQ(tier->Stats().corrupt, 1u);
}

TEST_F(FsTierTest, ChunkUnderAnotherKeysNameIsCorruption) {
  auto tier = Open("?neg_ttl_ms=0");
  ASSERT_TRUE(PutKey(*tier, 5).ok());
  std::filesystem::create_directories(std::filesystem::path(PathOf(6)).parent_path());
  std::filesystem::rename(PathOf(5), PathOf(6));
  std::vector<std::byte> out(Bytes());
  EXPECT_TRUE(tier->Get(Id(6), OnePiece(out).dst()).IsCorruption());
}

TEST_F(FsTierTest, ListRemoveAndCheck) {
  auto tier = Open("?neg_ttl_ms=0");
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(PutKey(*tier, i).ok());
  std::vector<ChunkInfo> seen;
  ASSERT_TRUE(tier->List([&](const ChunkInfo& c) { return seen.push_back(c), true; }).ok());
  ASSERT_EQ(seen.size(), 4u);
  for (const ChunkInfo& c : seen) {
    EXPECT_EQ(c.id.ns, ns_.id());
    EXPECT_EQ(c.stored_bytes, StoredChunkBytes(Bytes()));
    EXPECT_TRUE(tier->Check(c).ok());
  }
  ASSERT_TRUE(tier->Remove(Id(0)).ok());
  ASSERT_TRUE(tier->Remove(Id(0)).ok());  // removing twice is fine
  EXPECT_FALSE(tier->Contains(Id(0)));
  EXPECT_TRUE(tier->Check(ChunkInfo{Id(0), 0}).IsNotFound());
}

TEST_F(FsTierTest, GetManyMixesHitsAndMisses) {
  auto tier = Open();
  ASSERT_TRUE(PutKey(*tier, 0).ok());
  ASSERT_TRUE(PutKey(*tier, 2).ok());
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(Bytes()));
  std::vector<OnePiece> pieces;
  for (auto& b : bufs) pieces.emplace_back(b);
  std::vector<ReadOp> ops;
  for (size_t i = 0; i < 3; ++i) ops.push_back(ReadOp{Id(i), pieces[i].dst(), Status::OK()});
  tier->GetMany(ops);
  EXPECT_TRUE(ops[0].status.ok());
  EXPECT_TRUE(ops[1].status.IsNotFound());
  EXPECT_TRUE(ops[2].status.ok());
  EXPECT_EQ(bufs[2], PayloadFor(keys_[2], Bytes()));
}

TEST_F(FsTierTest, ConcurrentWritersOfOneKeyAreHarmless) {
  auto tier = Open("?neg_ttl_ms=0");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        { Status ps = PutKey(*tier, 7); EXPECT_TRUE(ps.ok()) << ps.ToString(); }
        EXPECT_TRUE(tier->Remove(Id(7)).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(PutKey(*tier, 7).ok());
  std::vector<std::byte> out(Bytes());
  ASSERT_TRUE(tier->Get(Id(7), OnePiece(out).dst()).ok());
  EXPECT_EQ(out, PayloadFor(keys_[7], Bytes()));
  EXPECT_EQ(tier->Stats().corrupt, 0u);
}

TEST_F(FsTierTest, WrongDestinationSizeIsInvalidArgument) {
  auto tier = Open();
  ASSERT_TRUE(PutKey(*tier, 0).ok());
  std::vector<std::byte> out(Bytes() - 1);
  EXPECT_EQ(tier->Get(Id(0), OnePiece(out).dst()).code(), Code::kInvalidArgument);
}

TEST_F(FsTierTest, CapacityBoundsAChunkAndIsReported) {
  auto tier = Open("?capacity=8KiB");
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(PutKey(*tier, 0).IsNoSpace());  // a 16 KiB chunk can never fit in 8 KiB
  EXPECT_EQ(tier->Stats().capacity_bytes, 8192u);
}

TEST_F(FsTierTest, RejectsBadOptionsAndNewerPools) {
  EXPECT_EQ(OpenFsTier(*TierUrl::Parse("fs://" + dir_.path() + "?colour=blue")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(OpenFsTier(*TierUrl::Parse("fs://?capacity=1GiB")).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(OpenFsTier(*TierUrl::Parse("fs://" + dir_.path() + "/none?create=false")).status().IsNotFound());
  auto tier = Open();
  tier.reset();
  std::ofstream(dir_.path() + "/pool/KVTIER_POOL") << EncodeDirMarker(PoolDirSpec(), kPoolFormatVersion + 1);
  auto again = OpenFsTier(*TierUrl::Parse("fs://" + dir_.path() + "/pool"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kVersionMismatch);
}

// Looking changes nothing: a read-only open runs no gc pass whatever capacity= says, refuses Put and
// Remove, leaves a corrupt chunk in place, and never creates a pool.
TEST_F(FsTierTest, ReadOnlyOpenChangesNothing) {
  {
    auto tier = Open();
    for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(PutKey(*tier, i).ok());
  }
  ASSERT_TRUE(CorruptPoolChunkForTesting(dir_.path() + "/pool", Id(0)).ok());
  auto url = TierUrl::Parse("fs://" + dir_.path() + "/pool?capacity=1KiB&neg_ttl_ms=0");
  ASSERT_TRUE(url.ok());
  auto ro = OpenFsTier(*url, TierOpenOptions{.read_only = true});
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_TRUE((*ro)->capabilities().read_only);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(std::filesystem::exists(PathOf(i))) << i;
  std::vector<std::byte> out(Bytes());
  EXPECT_TRUE((*ro)->Get(Id(0), OnePiece(out).dst()).IsCorruption());
  EXPECT_TRUE(std::filesystem::exists(PathOf(0)));
  ASSERT_TRUE((*ro)->Get(Id(1), OnePiece(out).dst()).ok());
  EXPECT_EQ(out, PayloadFor(keys_[1], Bytes()));
  EXPECT_EQ(PutKey(**ro, 5).code(), Code::kNotSupported);
  EXPECT_EQ((*ro)->Remove(Id(1)).code(), Code::kNotSupported);
  EXPECT_TRUE(std::filesystem::exists(PathOf(1)));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/pool/" + std::string(kPoolUsageName)));
  auto missing = OpenFsTier(*TierUrl::Parse("fs://" + dir_.path() + "/none"), TierOpenOptions{.read_only = true});
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/none"));
}

}  // namespace
}  // namespace kvtier::internal
