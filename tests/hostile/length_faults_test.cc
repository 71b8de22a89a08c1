// Issue 39, item 6 (carried over from issue 23's failure 6): a stored length that disagrees with the
// layout its chunk names is corruption on every read path of the Store: removed, counted, and the key
// saved again. Load already held it (`LengthFaultsAreCorruption.*` in invariants_test.cc, file:// and
// fs://); Borrow, the lending path of mem:// and shm://, handed the caller a chunk of the forged length.
// A forwarding tier lends a chunk one piece short, as a resealed header makes a lender do.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "hostile/hostile_util.h"
#include "kvtier/forwarding_tier.h"
#include "kvtier/store.h"

namespace kvtier::testing {
namespace {

// Lends what the inner tier lends, 64 bytes short: the length a forged header gives a lender.
class ShortLendingTier final : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  Result<BorrowedChunk> Borrow(const ChunkId& id) override {
    auto b = inner().Borrow(id);
    if (!b.ok()) return b;
    std::vector<std::span<const std::byte>> pieces(b->pieces().begin(), b->pieces().end());
    if (pieces.empty() || pieces.back().size() < 64) return Status::Internal("test chunk too small");
    pieces.back() = pieces.back().first(pieces.back().size() - 64);
    auto held = std::make_shared<BorrowedChunk>(std::move(*b));
    return BorrowedChunk(std::move(pieces), [held] { held->Release(); });
  }
};

TEST(LengthFaultsAreCorruption, ABorrowOfAForgedLengthIsCorruptionRemovedAndSavedAgain) {
  auto inner = OpenTier("mem://?capacity=1MiB&page=64");
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  std::shared_ptr<Tier> mem = std::move(*inner);
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<ShortLendingTier>(mem));
  auto store = Store::Open(std::move(tiers), StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const Namespace ns = TestNamespace();
  const ChunkKey key = KeyNo(ns, 1);
  const std::vector<std::byte> good = PayloadFor(key, ns.layout().BytesPerChunk());
  const std::span<const std::byte> piece(good);
  const GatherList src(&piece, 1);
  ASSERT_TRUE((*store)->Save(ns, std::span<const ChunkKey>(&key, 1), std::span<const GatherList>(&src, 1)).ok());
  ASSERT_TRUE((*store)->Flush().ok());

  auto b = (*store)->Borrow(ns, key);
  EXPECT_FALSE(b.ok()) << "lent " << (b.ok() ? b->size() : 0) << " bytes where the layout has " << good.size();
  EXPECT_EQ(b.status().code(), Code::kCorruption) << b.status().ToString();
  b = Status::NotFound("");  // released
  EXPECT_FALSE(mem->Contains(ChunkId::Of(ns, key))) << "kept: every later save skips it, it misses forever";
  EXPECT_EQ((*store)->Stats().tiers.at(0).corrupt, 1u);
  ASSERT_TRUE((*store)->Save(ns, std::span<const ChunkKey>(&key, 1), std::span<const GatherList>(&src, 1)).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  EXPECT_TRUE(mem->Contains(ChunkId::Of(ns, key))) << "saved again";
}

}  // namespace
}  // namespace kvtier::testing
