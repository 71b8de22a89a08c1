// The landing helpers clients with ScatterReads use (object/object_client.h): ObjectLander writes an
// object's bytes as they arrive across the header buffer and the caller's pieces, LandingPieces lists
// those buffers for a compound read, CompleteLanding ends the op (too large, short, or landed).
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <numeric>
#include <vector>

#include "tiers/object/object_client.h"

namespace kvtier::object {
namespace {

std::vector<std::byte> Bytes(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 7 + seed) & 0xFF);
  return v;
}

// A header of 5 bytes, then pieces of 3, 0 (skipped) and 6 bytes: 14 bytes of capacity.
struct Layout {
  std::vector<std::byte> head = std::vector<std::byte>(5, std::byte{0xEE});
  std::vector<std::byte> a = std::vector<std::byte>(3, std::byte{0xEE});
  std::vector<std::byte> b = std::vector<std::byte>(6, std::byte{0xEE});
  std::array<std::span<std::byte>, 3> pieces{std::span(a), std::span<std::byte>(), std::span(b)};
  ObjectRead op;
  Layout() {
    op.name = "obj";
    op.dst = head;
    op.rest = pieces;
  }
  std::vector<std::byte> Joined() const {
    std::vector<std::byte> all(head);
    all.insert(all.end(), a.begin(), a.end());
    all.insert(all.end(), b.begin(), b.end());
    return all;
  }
};

TEST(ObjectLanderTest, BytesInUnevenStepsLandAcrossHeaderAndPiecesInOrder) {
  Layout l;
  const auto object = Bytes(14, 3);
  ObjectLander lander(l.op);
  EXPECT_FALSE(l.op.wrote);
  // Steps that cross every boundary: 2 | 4 (header -> a) | 1 | 7 (a -> empty -> b).
  size_t at = 0;
  for (size_t step : {2, 4, 1, 7}) {
    ASSERT_TRUE(lander.Append(std::span(object).subspan(at, step)));
    at += step;
    EXPECT_EQ(lander.landed(), at);
  }
  EXPECT_TRUE(l.op.wrote);
  EXPECT_EQ(l.Joined(), object);
}

TEST(ObjectLanderTest, AnObjectLargerThanTheDestinationIsRefusedWithoutCopying) {
  Layout l;
  const auto object = Bytes(15, 1);
  ObjectLander lander(l.op);
  ASSERT_TRUE(lander.Append(std::span(object).first(10)));
  EXPECT_FALSE(lander.Append(std::span(object).subspan(10)));  // 5 more would make 15 > 14
  EXPECT_EQ(lander.landed(), 10u);
  std::vector<std::byte> want(object.begin(), object.begin() + 10);
  want.resize(14, std::byte{0xEE});  // the last piece's tail is untouched
  EXPECT_EQ(l.Joined(), want);
}

TEST(ObjectLanderTest, EmptyAppendsWriteNothing) {
  Layout l;
  ObjectLander lander(l.op);
  EXPECT_TRUE(lander.Append({}));
  EXPECT_FALSE(l.op.wrote);
}

TEST(LandingPiecesTest, HeaderThenNonEmptyPieces) {
  Layout l;
  const auto pieces = LandingPieces(l.op);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].data(), l.head.data());
  EXPECT_EQ(pieces[1].data(), l.a.data());
  EXPECT_EQ(pieces[2].data(), l.b.data());
  ObjectRead probe;  // a size probe: nothing to land in
  EXPECT_TRUE(LandingPieces(probe).empty());
}

TEST(CompleteLandingTest, WholeObjectIsOkAndCallsLanded) {
  Layout l;
  int calls = 0;
  l.op.landed = [&](ObjectRead& r) {
    ++calls;
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(r.bytes, 12u);
  };
  CompleteLanding(l.op, 12, 12, "test");
  EXPECT_TRUE(l.op.status.ok());
  EXPECT_EQ(l.op.bytes, 12u);
  EXPECT_EQ(calls, 1);
}

// Ends `op` of Layout as an object of `object_bytes` of which `landed` bytes came; how often `landed` ran.
int CompleteCountingLanded(Layout& l, uint64_t object_bytes, uint64_t landed) {
  int calls = 0;
  l.op.landed = [&](ObjectRead&) { ++calls; };
  CompleteLanding(l.op, object_bytes, landed, "test");
  return calls;
}

TEST(CompleteLandingTest, TooLargeIsInvalidArgumentWithTheSizeAndNoLanded) {
  Layout l;
  EXPECT_EQ(CompleteCountingLanded(l, 20, 14), 0);
  EXPECT_EQ(l.op.status.code(), Code::kInvalidArgument);
  EXPECT_EQ(l.op.bytes, 20u);  // the tier reads a foreign object whole by this size
  EXPECT_NE(l.op.status.ToString().find("test: object obj has 20 bytes"), std::string::npos)
      << l.op.status.ToString();
}

TEST(CompleteLandingTest, ShortReadIsRetryableAndNoLanded) {
  Layout l;
  EXPECT_EQ(CompleteCountingLanded(l, 12, 9), 0);
  EXPECT_EQ(l.op.status.code(), Code::kIOError);
  EXPECT_TRUE(l.op.status.retryable());
}

TEST(LandObjectTest, UsesTheLanderAcrossPieces) {
  Layout l;
  const auto object = Bytes(11, 9);
  ASSERT_TRUE(LandObject(l.op, object).ok());
  EXPECT_EQ(l.op.bytes, 11u);
  EXPECT_TRUE(l.op.wrote);
  auto got = l.Joined();
  EXPECT_TRUE(std::equal(object.begin(), object.end(), got.begin()));
  EXPECT_EQ(got[11], std::byte{0xEE});
}

}  // namespace
}  // namespace kvtier::object
