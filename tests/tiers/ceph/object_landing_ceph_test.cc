// Reads of rados:// and s3:// land straight in the caller's pieces (ScatterReads): on the binary's
// real cluster (fault_cluster.h), a chunk read into many uneven pieces comes back byte-exact, and an
// object replaced behind the tier's back by a larger or a shorter one is Corruption with the
// destination zeroed and the object removed (never a partial landing handed back).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tiers/ceph/fault_cluster.h"
#include "core/chunk_format.h"
#include "tiers/object/object_names.h"
#include "tiers/object/object_tier.h"
#include "store/store_fixture.h"

namespace kvtier::ceph_testing {
namespace {

// Parameter: "rados" or "s3".
class CephLanding : public kvtier::testing::StoreTestBase, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    ASSERT_NE(g_ceph, nullptr) << "the cluster did not start (see above)";
  }
  std::string Url(const std::string& name) const {
    if (std::string(GetParam()) == "rados") return "rados://kvtier/" + name + "?conf=" + g_ceph->conf();
    std::string url = g_ceph->s3_url();
    return url.insert(url.find('?'), "/" + name) + "&create_bucket=1";
  }
  std::unique_ptr<Tier> Open(const std::string& name) {
    auto t = OpenTier(Url(name));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  static std::vector<std::byte> Payload(size_t n, uint32_t seed) {
    std::vector<std::byte> p(n);
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<std::byte>((k * 13 + seed) & 0xFF);
    return p;
  }
  static constexpr size_t kPayload = 64 << 10;
  static void PutChunk(Tier& tier, const ChunkId& id) {
    const auto data = Payload(kPayload, 6);
    const std::span<const std::byte> src(data);
    ASSERT_TRUE(tier.Put(id, GatherList(&src, 1)).ok());
  }
  // A read of `id` (a kPayload chunk whose object was damaged) fails verification: Corruption, the
  // destination zeroed (whatever had landed in it), the object removed and counted.
  static void ExpectCorruptZeroedAndRemoved(Tier& tier, const ChunkId& id) {
    std::vector<std::byte> out(kPayload, std::byte{0xEE});
    const std::span<std::byte> dst(out);
    const Status s = tier.Get(id, ScatterList(&dst, 1));
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_EQ(std::count(out.begin(), out.end(), std::byte{0}), static_cast<long>(out.size()));
    EXPECT_FALSE(tier.Contains(id));
    EXPECT_EQ(tier.Stats().corrupt, 1u);
  }
  ChunkId Id(uint32_t i) const { return ChunkId::Of(ns_, Keys(1, 700 + i)[0]); }
  // Replaces chunk `id`'s object with `bytes`, through the tier's own client.
  static void Replace(Tier& tier, const ChunkId& id, const std::vector<std::byte>& bytes) {
    auto& o = dynamic_cast<object::ObjectTier&>(tier);
    const std::span<const std::byte> piece(bytes);
    object::ObjectWrite w{object::ChunkObjectName(o.options().prefix, id), GatherList(&piece, 1), Status::OK()};
    o.client().PutMany(std::span(&w, 1));
    ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  }
};

TEST_P(CephLanding, ChunkReadIntoManyUnevenPiecesIsByteExact) {
  auto tier = Open("landing-pieces");
  ASSERT_NE(tier, nullptr);
  const auto data = Payload((1 << 20) + 4321, 5);
  const std::span<const std::byte> src(data);
  ASSERT_TRUE(tier->Put(Id(1), GatherList(&src, 1)).ok());
  std::vector<std::byte> out(data.size(), std::byte{0xEE});
  const std::span<std::byte> all(out);
  // Pieces of 1, 4095, 4096, 100000, then the rest: they cross the header/page boundaries unevenly.
  std::vector<std::span<std::byte>> pieces{all.first(1), all.subspan(1, 4095), all.subspan(4096, 4096),
                                           all.subspan(8192, 100000), all.subspan(108192)};
  ASSERT_TRUE(tier->Get(Id(1), pieces).ok());
  EXPECT_TRUE(out == data);
  EXPECT_EQ(tier->Stats().corrupt, 0u);
  EXPECT_TRUE(tier->Remove(Id(1)).ok());
}

TEST_P(CephLanding, ObjectReplacedByALargerOneIsCorruptionZeroedAndRemoved) {
  auto tier = Open("landing-larger");
  ASSERT_NE(tier, nullptr);
  PutChunk(*tier, Id(2));
  Replace(*tier, Id(2), Payload(internal::kChunkHeaderSize + 2 * kPayload, 9));
  ExpectCorruptZeroedAndRemoved(*tier, Id(2));
}

TEST_P(CephLanding, ObjectReplacedByAShorterOneIsCorruptionZeroedAndRemoved) {
  auto tier = Open("landing-shorter");
  ASSERT_NE(tier, nullptr);
  PutChunk(*tier, Id(3));
  auto& o = dynamic_cast<object::ObjectTier&>(*tier);
  // The chunk's own first half: a valid header, then only part of the payload.
  std::vector<std::byte> whole(internal::kChunkHeaderSize + kPayload);
  object::ObjectRead read{object::ChunkObjectName(o.options().prefix, Id(3)), whole, 0, Status::OK()};
  o.client().GetMany(std::span(&read, 1));
  ASSERT_TRUE(read.status.ok()) << read.status.ToString();
  whole.resize(internal::kChunkHeaderSize + kPayload / 2);
  Replace(*tier, Id(3), whole);
  ExpectCorruptZeroedAndRemoved(*tier, Id(3));
}

INSTANTIATE_TEST_SUITE_P(Backends, CephLanding, ::testing::Values("rados", "s3"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kvtier::ceph_testing
