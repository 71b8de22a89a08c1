// Store::LoadWithProgress: a chunk's leading bytes are reported as they are verified, before the rest of
// the chunk lands (a gated tier: no timing), and a chunk that fails after some of its bytes were
// reported ends the load there (never read again from a slower tier, zeroed, not counted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/store.h"
#include "store/chunk_landing.h"
#include "store/store_fixture.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using internal::CondVar;
using internal::Mutex;
using internal::MutexLock;

bool IsZero(std::byte b) { return b == std::byte{0}; }

// Records what a load reports; WaitFor blocks until a chunk has landed that far.
class Recorder final : public LoadProgress {
 public:
  explicit Recorder(size_t chunks) : landed_(chunks, 0), calls_(chunks) {}
  void Landed(size_t chunk, uint64_t bytes) override {
    MutexLock lock(mu_);
    EXPECT_GT(bytes, landed_[chunk]) << "reports of a chunk only grow";
    landed_[chunk] = bytes;
    calls_[chunk].push_back(bytes);
    log_.emplace_back(chunk, bytes);
    cv_.NotifyAll();
  }
  void WaitFor(size_t chunk, uint64_t bytes) {
    MutexLock lock(mu_);
    while (landed_[chunk] < bytes) cv_.Wait(mu_);
  }
  uint64_t landed(size_t chunk) {
    MutexLock lock(mu_);
    return landed_[chunk];
  }
  std::vector<uint64_t> calls(size_t chunk) {
    MutexLock lock(mu_);
    return calls_[chunk];
  }
  std::vector<std::pair<size_t, uint64_t>> log() {  // every report, in the order they came
    MutexLock lock(mu_);
    return log_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<uint64_t> landed_ GUARDED_BY(mu_);
  std::vector<std::vector<uint64_t>> calls_ GUARDED_BY(mu_);
  std::vector<std::pair<size_t, uint64_t>> log_ GUARDED_BY(mu_);
};

// Reads a chunk from the wrapped tier, lands its first half in the destination and reports it, then
// waits at a gate before landing the rest (or, with fail_after_gate, failing the read the way a
// corrupt late piece does: destination zeroed, Corruption).
class GateTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  bool fail_after_gate = false;

  void GetMany(std::span<ReadOp> ops) override {
    for (ReadOp& op : ops) op.status = GatedGet(op);
  }
  Status Get(const ChunkId& id, ScatterList dst) override {
    ReadOp op{id, dst, Status::OK()};
    return GatedGet(op);
  }
  void Open() {
    MutexLock lock(mu_);
    open_ = true;
    cv_.NotifyAll();
  }

 private:
  Status GatedGet(ReadOp& op) {
    std::vector<std::byte> all(TotalBytes(op.dst));
    std::span<std::byte> whole(all);
    KVTIER_RETURN_IF_ERROR(inner_->Get(op.id, ScatterList(&whole, 1)));
    const size_t half = all.size() / 2;
    CopyOut(all, 0, half, op.dst);
    if (op.progress != nullptr) op.progress->Verified(0, half);
    {
      MutexLock lock(mu_);
      while (!open_) cv_.Wait(mu_);
    }
    if (fail_after_gate) {
      for (const auto& piece : op.dst) std::memset(piece.data(), 0, piece.size());
      return Status::Corruption("a late piece failed its checksum");
    }
    CopyOut(all, half, all.size() - half, op.dst);
    if (op.progress != nullptr) op.progress->Verified(half, all.size() - half);
    return Status::OK();
  }
  static void CopyOut(const std::vector<std::byte>& all, size_t from, size_t len, ScatterList dst) {
    size_t at = 0;
    for (const auto& piece : dst) {
      const size_t b = std::max(at, from), e = std::min(at + piece.size(), from + len);
      if (b < e) std::memcpy(piece.data() + (b - at), all.data() + b, e - b);
      at += piece.size();
    }
  }

  Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;
};

class StoreProgressTest : public StoreTestBase {
 protected:
  // Opens a Store over a gate (in front of a mem:// tier holding `keys`) and, when `lower`, a slower
  // mem:// tier that holds them too.
  std::unique_ptr<Store> OpenGated(std::span<const ChunkKey> keys, bool lower, GateTier** gate) {
    auto top = OpenSharedMem();
    std::vector<std::unique_ptr<Tier>> tiers;
    auto g = std::make_unique<GateTier>(top, /*in_memory=*/true);
    *gate = g.get();
    tiers.push_back(std::move(g));
    if (lower) tiers.push_back(OpenMem());
    auto store = Store::Open(std::move(tiers), StoreOptions{});
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    for (const auto& k : keys) {
      const auto p = PayloadOf(k);
      std::span<const std::byte> s(p);
      const GatherList src(&s, 1);
      EXPECT_TRUE(top->Put(ChunkId::Of(ns_, k), src).ok());
      if (lower) {
        EXPECT_TRUE((*store)->tier(1).Put(ChunkId::Of(ns_, k), src).ok());
      }
    }
    return std::move(store).value();
  }
};

TEST_F(StoreProgressTest, FirstHalfIsReportedBeforeTheGateLetsTheRestLand) {
  const auto keys = Keys(2);
  GateTier* gate = nullptr;
  auto store = OpenGated(keys, /*lower=*/false, &gate);
  std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(bytes_));
  std::vector<std::span<std::byte>> spans(out.begin(), out.end());
  std::vector<ScatterList> dsts{ScatterList(&spans[0], 1), ScatterList(&spans[1], 1)};
  Recorder rec(2);
  Result<size_t> n = Status::Internal("not run");
  std::thread loader([&] { n = store->LoadWithProgress(ns_, keys, dsts, &rec); });
  rec.WaitFor(0, bytes_ / 2);
  // The load is held at the gate: chunk 0's first half is there and verified, its second half is not.
  const auto want = PayloadOf(keys[0]);
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + bytes_ / 2, out[0].begin()));
  EXPECT_TRUE(std::all_of(out[0].begin() + bytes_ / 2, out[0].end(), IsZero));
  EXPECT_EQ(rec.landed(0), bytes_ / 2);
  EXPECT_EQ(rec.landed(1), 0u);
  gate->Open();
  loader.join();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rec.landed(i), bytes_);
    EXPECT_TRUE(out[i] == PayloadOf(keys[i]));
  }
  EXPECT_EQ(rec.calls(0), (std::vector<uint64_t>{bytes_ / 2, bytes_}));
}

TEST_F(StoreProgressTest, AChunkThatFailsAfterReportingIsNotReadAgainFromASlowerTier) {
  const auto keys = Keys(2);
  GateTier* gate = nullptr;
  auto store = OpenGated(keys, /*lower=*/true, &gate);
  gate->fail_after_gate = true;
  gate->Open();
  std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(bytes_, std::byte{7}));
  std::vector<std::span<std::byte>> spans(out.begin(), out.end());
  std::vector<ScatterList> dsts{ScatterList(&spans[0], 1), ScatterList(&spans[1], 1)};
  Recorder rec(2);
  auto n = store->LoadWithProgress(ns_, keys, dsts, &rec);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u) << "the chunk whose first half was reported failed: the load ends before it";
  EXPECT_EQ(rec.landed(0), bytes_ / 2);
  for (const auto& o : out) {
    EXPECT_TRUE(std::all_of(o.begin(), o.end(), IsZero));
  }
  // Without progress nothing was promised, and the slower tier's copy serves both chunks.
  auto plain = store->Load(ns_, keys, dsts);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, 2u);
  EXPECT_TRUE(out[0] == PayloadOf(keys[0]));
}

TEST(ChunkLandingTest, RangesInAnyOrderGrowThePrefix) {
  Recorder rec(1);
  internal::ChunkLanding landing(&rec, 0);
  landing.Verified(4, 4);
  landing.Verified(12, 4);
  EXPECT_EQ(rec.landed(0), 0u);
  EXPECT_FALSE(landing.reported());
  landing.Verified(0, 4);
  EXPECT_EQ(rec.landed(0), 8u);
  landing.Verified(2, 4);  // already covered: nothing new
  landing.Verified(8, 4);
  EXPECT_EQ(rec.landed(0), 16u);
  landing.Complete(20);
  EXPECT_EQ(rec.calls(0), (std::vector<uint64_t>{8, 16, 20}));
  EXPECT_TRUE(landing.reported());
}

// A waiter for every chunk's first bytes is woken only when the least prefix rises (kvtier_op_wait_bytes:
// a mem:// load reports every 2 MiB slice), and never misses the rise that lets it through.
TEST(LandedPrefixesTest, ReportSaysWhenTheLeastPrefixRises) {
  internal::LandedPrefixes p(3);
  EXPECT_FALSE(p.Report(0, 8));
  EXPECT_FALSE(p.Report(0, 16));
  EXPECT_FALSE(p.Report(2, 4));
  EXPECT_EQ(p.least(), 0u);
  EXPECT_EQ(p.Leading(4), 1u);
  EXPECT_TRUE(p.Report(1, 8));  // the last chunk at 0
  EXPECT_EQ(p.least(), 4u);
  EXPECT_EQ(p.Leading(4), 3u);
  EXPECT_EQ(p.Leading(8), 2u);
  EXPECT_TRUE(p.Report(2, 16));  // 4 -> 8 (chunk 1)
  EXPECT_EQ(p.least(), 8u);
  EXPECT_FALSE(p.Report(0, 24));
  EXPECT_FALSE(p.Report(2, 24));
  EXPECT_TRUE(p.Report(1, 24));  // every chunk at 24
  EXPECT_EQ(p.least(), 24u);
  EXPECT_EQ(p.Leading(25), 0u);
  internal::LandedPrefixes none;
  EXPECT_EQ(none.Leading(1), 0u);
}

StoreOptions OneTier(const std::string& url) {
  StoreOptions options;
  options.tiers = {url};
  return options;
}

// Saves one chunk of `layout` filled with `fill` (the tokens of one chunk), loads it with progress and
// expects it loaded byte-exact after progress reports of `expected` landed bytes.
void SaveOneChunkThenLoadWithProgress(Store& store, const Layout& layout, std::byte fill,
                                      const std::vector<uint64_t>& expected) {
  const Namespace ns = *Namespace::Make("test/progress", layout, "");
  const std::vector<uint32_t> tokens(layout.tokens_per_chunk, 5);
  const auto keys = ComputeChunkKeys(ns, tokens);
  std::vector<std::byte> data(layout.BytesPerChunk(), fill), out(data.size());
  std::span<const std::byte> src(data);
  ASSERT_TRUE(store.Save(ns, keys, std::vector<GatherList>{GatherList(&src, 1)}).ok());
  std::span<std::byte> dst(out);
  Recorder rec(1);
  auto n = store.LoadWithProgress(ns, keys, std::vector<ScatterList>{ScatterList(&dst, 1)}, &rec);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(rec.calls(0), expected);
  EXPECT_TRUE(out == data);
}

// A mem:// tier copying on one thread reports each 2 MiB slice of an 8 MiB chunk as it is copied.
TEST(StoreProgressTiers, MemReportsSlicesInOrder) {
  const Layout layout{2, 8, 128, DType::kBF16, 1024};  // 8 MiB chunks
  auto store = Store::Open(OneTier("mem://?capacity=32MiB&threads=1"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SaveOneChunkThenLoadWithProgress(**store, layout, std::byte{3},
                                   std::vector<uint64_t>{2 << 20, 4 << 20, 6 << 20, 8 << 20});
}

// A mem:// load of several chunks copies slice 0 of every chunk before slice 1 of any: a layer-wise
// reader, which needs the first bytes of every chunk, has them once half of these bytes landed.
TEST(StoreProgressTiers, MemCopiesSliceBySliceAcrossChunks) {
  const Layout layout{2, 8, 128, DType::kBF16, 512};  // 4 MiB chunks: 2 slices
  auto store = Store::Open(OneTier("mem://?capacity=32MiB&threads=1"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const Namespace ns = *Namespace::Make("test/progress", layout, "");
  const auto keys = ComputeChunkKeys(ns, std::vector<uint32_t>(2 * layout.tokens_per_chunk, 7));
  ASSERT_EQ(keys.size(), 2u);
  std::vector<std::vector<std::byte>> data, out;
  std::vector<GatherList> src;
  std::vector<ScatterList> dst;
  std::vector<std::span<const std::byte>> in(2);
  std::vector<std::span<std::byte>> to(2);
  for (size_t i = 0; i < 2; ++i) {
    data.emplace_back(layout.BytesPerChunk(), std::byte(i + 1));
    out.emplace_back(layout.BytesPerChunk());
  }
  for (size_t i = 0; i < 2; ++i) {
    in[i] = data[i];
    to[i] = out[i];
    src.emplace_back(&in[i], 1);
    dst.emplace_back(&to[i], 1);
  }
  ASSERT_TRUE((*store)->Save(ns, keys, src).ok());
  Recorder rec(2);
  auto n = (*store)->LoadWithProgress(ns, keys, dst, &rec);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2u);
  const uint64_t slice = 2 << 20;
  EXPECT_EQ(rec.log(), (std::vector<std::pair<size_t, uint64_t>>{{0, slice}, {1, slice}, {0, 2 * slice},
                                                                   {1, 2 * slice}}));
  EXPECT_TRUE(out == data);
}

// A shm:// pool verifies each 1 MiB piece against its checksum as it copies it, and reports it.
TEST(StoreProgressTiers, ShmReportsVerifiedPieces) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const Layout layout{2, 8, 128, DType::kBF16, 256};  // 2 MiB chunks: 2 pieces
  auto store = Store::Open(OneTier("shm://progress?capacity=8MiB&threads=1&dir=" + dir.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SaveOneChunkThenLoadWithProgress(**store, layout, std::byte{4}, std::vector<uint64_t>{1 << 20, 2 << 20});
}

// file:// verifies each 1 MiB piece of the chunk format as it lands and reports it; a flipped byte in
// the last piece fails the chunk after its first piece was reported, and the load ends there.
TEST(StoreProgressTiers, FileReportsVerifiedPiecesAndACorruptLastPieceFailsTheChunk) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const Layout layout{2, 8, 128, DType::kBF16, 1024};  // 8 MiB chunks: 8 pieces of 1 MiB
  const Namespace ns = *Namespace::Make("test/progress", layout, "");
  const std::vector<uint32_t> tokens(1024, 9);
  const auto keys = ComputeChunkKeys(ns, tokens);
  std::vector<std::byte> data(layout.BytesPerChunk()), out(data.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7);
  const std::string url = "file://" + dir.path() + "?capacity=64MiB";
  {
    auto store = Store::Open(OneTier(url));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::span<const std::byte> src(data);
    ASSERT_TRUE((*store)->Save(ns, keys, std::vector<GatherList>{GatherList(&src, 1)}).ok());
    ASSERT_TRUE((*store)->Flush().ok());
  }
  std::span<std::byte> dst(out);
  const std::vector<ScatterList> dsts{ScatterList(&dst, 1)};
  {
    auto store = Store::Open(OneTier(url));
    ASSERT_TRUE(store.ok());
    Recorder rec(1);
    auto n = (*store)->LoadWithProgress(ns, keys, dsts, &rec);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 1u);
    EXPECT_EQ(rec.landed(0), data.size());
    EXPECT_TRUE(out == data);
  }
  std::string chunk_file;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file() && e.file_size() > data.size()) chunk_file = e.path();
  }
  ASSERT_FALSE(chunk_file.empty());
  {
    std::fstream f(chunk_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + static_cast<std::streamoff>(data.size()) - 10);  // the header, then the payload
    f.put('\x5a');
  }
  auto store = Store::Open(OneTier(url));
  ASSERT_TRUE(store.ok());
  Recorder rec(1);
  std::fill(out.begin(), out.end(), std::byte{1});
  auto n = (*store)->LoadWithProgress(ns, keys, dsts, &rec);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_GE(rec.landed(0), uint64_t{1} << 20) << "the good first piece was reported";
  EXPECT_LT(rec.landed(0), data.size());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), IsZero));
}

}  // namespace
}  // namespace kvtier::testing
