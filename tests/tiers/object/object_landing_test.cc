// How objects land: straight in the caller's pieces (a client with ScatterReads) or whole in staging
// (one without), verified as they land or afterwards (a client that never calls `landed`), and what
// a read that failed half way leaves in the destination.
#include "core/chunk_format.h"
#include "tiers/object/object_test_util.h"

namespace kvtier::testing {
namespace {

// A fake client that never calls `landed`: the tier must verify each object after the batch.
class SilentClient : public FakeObjectClient {
 public:
  using FakeObjectClient::FakeObjectClient;
  void GetMany(std::span<object::ObjectRead> ops) override {
    std::vector<std::function<void(object::ObjectRead&)>> saved;
    for (auto& op : ops) saved.push_back(std::exchange(op.landed, nullptr));
    FakeObjectClient::GetMany(ops);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].landed = std::move(saved[i]);
  }
};

// Parameter: (client scatters, client calls landed).
class ObjectLandingTest : public ObjectTierTestBase, public ::testing::WithParamInterface<std::tuple<bool, bool>> {
 protected:
  void SetUp() override { scatter_ = std::get<0>(GetParam()); }
  std::unique_ptr<object::ObjectTier> OpenTier() {
    if (std::get<1>(GetParam())) return Open();
    return Open(std::make_unique<SilentClient>(store_, scatter_), {});
  }
};

TEST_P(ObjectLandingTest, RoundTripIntoSeveralPieces) {
  auto tier = OpenTier();
  std::vector<ReadOp> ops;
  std::vector<std::vector<std::byte>> outs(6);
  std::vector<std::array<std::span<std::byte>, 3>> pieces(6);
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(Put(*tier, ObjId(ns_, i), 9000).ok());
    outs[i].assign(9000, std::byte{0xEE});
    pieces[i] = {std::span(outs[i]).first(100), std::span(outs[i]).subspan(100, 4000),
                 std::span(outs[i]).subspan(4100)};
    ops.push_back(ReadOp{ObjId(ns_, i), pieces[i], Status::OK()});
  }
  ops.push_back(ReadOp{ObjId(ns_, 99), pieces[0], Status::OK()});  // a miss at the end
  tier->GetMany(ops);
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.ToString();
    EXPECT_EQ(outs[i], ObjPayload(ObjId(ns_, i), 9000)) << i;
  }
  EXPECT_TRUE(ops[6].status.IsNotFound());
}

TEST_P(ObjectLandingTest, DamagedPayloadIsCorruptionZeroedAndDeleted) {
  auto tier = OpenTier();
  const ChunkId id = ObjId(ns_, 1);
  ASSERT_TRUE(Put(*tier, id).ok());
  ASSERT_TRUE(store_->FlipByte(Name(id), internal::kChunkHeaderSize + 2999).ok());
  std::vector<std::byte> out;
  EXPECT_TRUE(Get(*tier, id, &out).IsCorruption());
  EXPECT_TRUE(AllZero(out));
  EXPECT_FALSE(store_->Has(Name(id)));
  EXPECT_EQ(tier->Stats().corrupt, 1u);
}

TEST_P(ObjectLandingTest, ReadLostHalfWayIsRetriedAndTheRetryOverwritesIt) {
  auto tier = OpenTier();
  const ChunkId id = ObjId(ns_, 2);
  ASSERT_TRUE(Put(*tier, id).ok());
  store_->FailNextMidway(1, Status::IOError("connection reset", /*retryable=*/true));
  std::vector<std::byte> out;
  ASSERT_TRUE(Get(*tier, id, &out).ok());
  EXPECT_EQ(out, ObjPayload(id, 3000));
  EXPECT_EQ(sleeps_.size(), 1u);
}

TEST_P(ObjectLandingTest, ReadLostHalfWayThenGoneIsAnErrorWithAZeroedDestination) {
  // Half the object reached the caller's pieces, then the object was evicted before the retry: a miss
  // would leave those foreign bytes behind, so it is an error and the destination is zeroed.
  auto tier = OpenTier();
  const ChunkId id = ObjId(ns_, 3);
  ASSERT_TRUE(Put(*tier, id).ok());
  store_->FailNextMidway(1, Status::IOError("connection reset", /*retryable=*/true), /*erase=*/true);
  std::vector<std::byte> out;
  const Status s = Get(*tier, id, &out);
  if (scatter_) {
    EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
    EXPECT_TRUE(AllZero(out));
  } else {  // staging took the half object: the caller's buffer was never written
    EXPECT_TRUE(s.IsNotFound()) << s.ToString();
    EXPECT_EQ(out, std::vector<std::byte>(3000, std::byte{0xEE}));
  }
}

TEST_P(ObjectLandingTest, ReadLostHalfWayForGoodZeroesTheDestination) {
  auto tier = OpenTier();
  const ChunkId id = ObjId(ns_, 4);
  ASSERT_TRUE(Put(*tier, id).ok());
  store_->FailNextMidway(1, Status::IOError("checksum of the transport", /*retryable=*/false));
  std::vector<std::byte> out;
  EXPECT_EQ(Get(*tier, id, &out).code(), Code::kIOError);
  EXPECT_TRUE(AllZero(out));
  EXPECT_TRUE(store_->Has(Name(id)));  // not the object's fault: kept
}

INSTANTIATE_TEST_SUITE_P(Clients, ObjectLandingTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Scatter" : "Staging") +
                                  (std::get<1>(info.param) ? "Landed" : "Silent");
                         });

}  // namespace
}  // namespace kvtier::testing
