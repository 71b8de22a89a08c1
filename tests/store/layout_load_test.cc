// Prefix loads of model families beyond one K/V group (docs/models.md): the per-sequence state of a
// hybrid model is a miss of the prefix it ends when it is missing or damaged, never a stale hit; a
// sliding-window group is read only for the chunks that hold one of the last `window` tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/window_ranges.h"
#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/metrics.h"
#include "kvtier/store.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

// Qwen3-Next's shape, small: gated-attention layers 3 and 7 (2 KV heads), linear-attention layers with
// a 1000-byte state each; the state group is last in the chunk, as in the qwen3-next-80b-a3b preset.
Layout HybridSmall() {
  return ParseLayoutSpec(
             "layers=8 tokens=16 kv:layers=3-7/4,heads=2,dim=16,dtype=bf16 state:layers=0-2+4-6,bytes=1000,dtype=bf16")
      .value();
}

// gpt-oss's shape, small: window layers 0 and 2 (window 128), full layers 1 and 3, 8 KV heads of 8,
// chunks of 64 tokens (64 KiB).
Layout WindowSmall() {
  return ParseLayoutSpec(
             "layers=4 tokens=64 window:layers=0-2/2,heads=8,dim=8,window=128,dtype=bf16 "
             "kv:layers=1-3/2,heads=8,dim=8,dtype=bf16")
      .value();
}

constexpr std::byte kUntouched{0xC3};

// One save of `chunks` chunks into a fresh Store over one tier ("mem" or "file"), and loads of it.
class PrefixPool {
 public:
  PrefixPool(const std::string& scheme, const Layout& layout, size_t chunks)
      : ns_(Namespace::Make("test/prefix", layout, "").value()) {
    const std::string url = scheme == "mem" ? "mem://?capacity=4MiB&verify=true"
                            : scheme == "fs" ? "fs://" + dir_.path() + "/t?capacity=1GiB&direct=off"  // no read probe
                                             : "file://" + dir_.path() + "/t?capacity=1GiB";
    StoreOptions o;
    o.tiers = {url};
    o.promote_on_load = false;
    store_ = Store::Open(o).value();
    std::vector<uint32_t> tokens(chunks * layout.tokens_per_chunk);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 31 + 7);
    keys_ = ComputeChunkKeys(ns_, tokens);
    for (size_t c = 0; c < chunks; ++c) {
      std::vector<std::byte> b(layout.BytesPerChunk());
      uint64_t x = 0x9E3779B97F4A7C15ull * (c + 1);
      for (auto& v : b) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = static_cast<std::byte>(x >> 24);
      }
      truth_.push_back(std::move(b));
    }
    std::vector<std::span<const std::byte>> pieces(truth_.begin(), truth_.end());
    std::vector<GatherList> srcs;
    for (const auto& p : pieces) srcs.emplace_back(&p, 1);
    EXPECT_TRUE(store_->Save(ns_, keys_, srcs).ok());
    EXPECT_TRUE(store_->Flush().ok());
  }

  // Loads every saved chunk into destinations filled with kUntouched (two pieces each); `got` keeps them.
  size_t Load() {
    got_.assign(truth_.size(), std::vector<std::byte>(truth_[0].size(), kUntouched));
    std::vector<std::array<std::span<std::byte>, 2>> pieces;
    for (auto& g : got_) pieces.push_back({std::span(g).first(1000), std::span(g).subspan(1000)});
    std::vector<ScatterList> dsts(pieces.begin(), pieces.end());
    auto n = store_->Load(ns_, keys_, dsts);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : 0;
  }

  // Load through LoadWithProgress into zeroed destinations; returns what each chunk reported landed.
  std::vector<uint64_t> LoadReporting(size_t* loaded) {
    struct Record final : LoadProgress {
      std::vector<uint64_t> landed;
      void Landed(size_t chunk, uint64_t bytes) override { landed[chunk] = bytes; }  // a chunk at a time, under its lock
    } record;
    record.landed.assign(truth_.size(), 0);
    got_.assign(truth_.size(), std::vector<std::byte>(truth_[0].size(), kUntouched));
    std::vector<std::span<std::byte>> spans(got_.begin(), got_.end());
    std::vector<ScatterList> dsts;
    for (const auto& sp : spans) dsts.emplace_back(&sp, 1);
    auto n = store_->LoadWithProgress(ns_, keys_, dsts, &record);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    *loaded = n.ok() ? *n : 0;
    return record.landed;
  }

  // The chunk file of chunk `c` on file:// (found by its payload, stored in the clear after the header).
  std::string FileOf(size_t c) const {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path())) {
      if (!e.is_regular_file() || e.file_size() < truth_[c].size()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto* want = reinterpret_cast<const char*>(truth_[c].data());
      if (std::search(all.begin(), all.end(), want, want + truth_[c].size()) != all.end()) return e.path();
    }
    ADD_FAILURE() << "no file holds chunk " << c;
    return "";
  }

  // Flips the byte `offset` of chunk c's payload where it is stored (file:// or mem://).
  void Damage(size_t c, uint64_t offset) {
    if (store_->tier(0).url().starts_with("mem://")) {
      auto b = store_->Borrow(ns_, keys_[c]);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      for (const auto& p : b->pieces()) {
        if (offset < p.size()) {
          const_cast<std::byte&>(p[offset]) ^= std::byte{0x5A};  // behind the tier's back
          return;
        }
        offset -= p.size();
      }
      FAIL() << "offset past the chunk";
    }
    const std::string path = FileOf(c);
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    const auto at = static_cast<std::streamoff>(std::filesystem::file_size(path) - truth_[c].size() + offset);
    char v = 0;
    f.seekg(at);
    f.read(&v, 1);
    v ^= 0x5A;
    f.seekp(at);
    f.write(&v, 1);
  }

  const Namespace& ns() const { return ns_; }
  std::span<const ChunkKey> keys() const { return keys_; }
  Store& store() { return *store_; }
  const std::vector<std::byte>& truth(size_t c) const { return truth_[c]; }
  const std::vector<std::byte>& got(size_t c) const { return got_[c]; }

 private:
  testing::TempDir dir_;
  Namespace ns_;
  std::unique_ptr<Store> store_;
  std::vector<ChunkKey> keys_;
  std::vector<std::vector<std::byte>> truth_;
  std::vector<std::vector<std::byte>> got_;
};

// --- Hybrid state at chunk boundaries -----------------------------------------------------------------

constexpr size_t kHybridChunks = 6;

uint64_t StateOffset(const Layout& l) { return l.BytesPerChunk() - 6 * 1000; }  // the state group is last

// A load after chunk k's state was damaged or lost: chunks 0..k-1 byte-exact, state of chunk k-1
// included, nothing of chunk k or later handed back, and Lookup then ends at k too.
void ExpectPrefixEndsAt(PrefixPool& pool, size_t k) {
  ASSERT_EQ(pool.Load(), k) << "a hit past chunk " << k << " would come with a missing or stale state";
  for (size_t c = 0; c < k; ++c) EXPECT_TRUE(pool.got(c) == pool.truth(c)) << "chunk " << c;
  for (size_t c = k; c < kHybridChunks; ++c) EXPECT_FALSE(pool.got(c) == pool.truth(c)) << "chunk " << c;
  EXPECT_EQ(pool.store().Lookup(pool.ns(), pool.keys()), k);
}

TEST(HybridStateTest, StateIsPartOfEveryChunkAndVerifiedWithIt) {
  const Layout l = HybridSmall();
  // The chunk holds its own state after the per-token KV: the state as of the end of that chunk.
  EXPECT_EQ(l.BytesPerChunk(), 16u * 2 * (2 * 2 * 16 * 2) + 6u * 1000);
  // Listed pieces: one per KV head and one per state layer, so each state has its own checksum.
  const std::vector<uint64_t> pieces = l.PieceLengths();
  ASSERT_EQ(pieces.size(), 2u + 6u);
  for (size_t i = 2; i < pieces.size(); ++i) EXPECT_EQ(pieces[i], 1000u);
  for (const char* scheme : {"mem", "file"}) {
    PrefixPool pool(scheme, l, kHybridChunks);
    EXPECT_EQ(pool.Load(), kHybridChunks) << scheme;
    for (size_t c = 0; c < kHybridChunks; ++c) EXPECT_TRUE(pool.got(c) == pool.truth(c)) << scheme << " chunk " << c;
  }
}

TEST(HybridStateTest, DamagedStateOfChunkKEndsThePrefixAtK) {
  const Layout l = HybridSmall();
  for (const char* scheme : {"mem", "file"}) {
    for (size_t k : {size_t{0}, size_t{3}, kHybridChunks - 1}) {
      SCOPED_TRACE(std::string(scheme) + ", state of chunk " + std::to_string(k));
      PrefixPool pool(scheme, l, kHybridChunks);
      pool.Damage(k, StateOffset(l) + 2 * 1000 + 17);  // the third state layer's piece only
      ExpectPrefixEndsAt(pool, k);
    }
  }
}

TEST(HybridStateTest, LostStateOfChunkKEndsThePrefixAtK) {
  const Layout l = HybridSmall();
  for (size_t k : {size_t{2}, kHybridChunks - 1}) {
    SCOPED_TRACE("state of chunk " + std::to_string(k));
    PrefixPool pool("file", l, kHybridChunks);
    // The file loses its last state piece (a torn or truncated write): its per-token KV is intact.
    const std::string path = pool.FileOf(k);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1000);
    ExpectPrefixEndsAt(pool, k);
  }
  for (const char* scheme : {"mem", "file"}) {
    PrefixPool pool(scheme, l, kHybridChunks);
    ASSERT_TRUE(pool.store().Remove(pool.ns(), pool.keys().subspan(4, 1)).ok());  // chunk 4, state and all
    ExpectPrefixEndsAt(pool, 4);
  }
}

// --- Sliding-window loads ------------------------------------------------------------------------------

constexpr size_t kWindowChunks = 10;

// Chunk c of a loaded prefix of `prefix` chunks: the window group byte-exact when its chunk holds one of
// the prefix's last 128 tokens, untouched otherwise (`ranged`: the tier read ranges), the full group
// byte-exact always.
void ExpectWindowLoad(const PrefixPool& pool, size_t prefix, bool ranged) {
  const Layout l = WindowSmall();
  const uint64_t window_bytes = l.BytesPerChunk() / 2;  // the window group comes first, half the chunk
  for (size_t c = 0; c < prefix; ++c) {
    const auto& got = pool.got(c);
    const auto& truth = pool.truth(c);
    const bool skipped = ranged && (c + 1) * 64 + 128 <= prefix * 64;
    EXPECT_TRUE(std::equal(got.begin() + window_bytes, got.end(), truth.begin() + window_bytes)) << "full group, chunk " << c;
    if (skipped) {
      EXPECT_TRUE(std::all_of(got.begin(), got.begin() + window_bytes, [](std::byte b) { return b == kUntouched; }))
          << "window group of chunk " << c << " was written";
    } else {
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + window_bytes, truth.begin())) << "window group, chunk " << c;
    }
  }
}

TEST(WindowLoadTest, PlanSkipsChunksOutsideEveryWindow) {
  const Layout l = WindowSmall();
  const uint64_t half = l.BytesPerChunk() / 2;
  for (uint64_t c = 0; c < kWindowChunks; ++c) {
    const std::vector<ByteRange> skip = internal::WindowSkippedRanges(l, c, kWindowChunks);
    if (c < 8) {
      EXPECT_EQ(skip, (std::vector<ByteRange>{{0, half}})) << "chunk " << c;
    } else {
      EXPECT_TRUE(skip.empty()) << "chunk " << c << " holds one of the last 128 tokens";
    }
  }
  EXPECT_TRUE(internal::WindowSkippedRanges(HybridSmall(), 0, 100).empty());
  EXPECT_TRUE(internal::WindowSkippedRanges(Layout{2, 8, 16}, 0, 100).empty());  // classic: no window group
  EXPECT_EQ(internal::ComplementRanges(std::vector<ByteRange>{{0, half}}, 2 * half), (std::vector<ByteRange>{{half, half}}));
}

// The plan for gpt-oss-120b (256-token chunks) at a 32K prefix, against the minimum the model needs: the
// full layers of every token and the window layers of the last 128 tokens. (The plan's bytes are what
// file:// reads, as FileReadsTheWindowGroupOfTheLastChunksOnly measures on a small layout.)
TEST(WindowLoadTest, GptOss120bAt32KPlansWithinFivePercentOfTheMinimum) {
  const Layout l = FindModelPreset("gpt-oss-120b").value().layout;
  const uint64_t chunks = 32768 / l.tokens_per_chunk, naive = chunks * l.BytesPerChunk();
  uint64_t planned = 0;
  for (uint64_t c = 0; c < chunks; ++c) planned += l.BytesPerChunk() - internal::RangeBytes(internal::WindowSkippedRanges(l, c, chunks));
  const uint64_t per_token_layer = 2 * 8 * 64 * 2;  // K and V, 8 heads of 64, bf16
  const uint64_t minimum = 32768 * 18 * per_token_layer + 128 * 18 * per_token_layer;
  std::printf("gpt-oss-120b, 32K prefix: planned %llu bytes, minimum %llu, naive %llu (%.1f%% of naive)\n",
              static_cast<unsigned long long>(planned), static_cast<unsigned long long>(minimum),
              static_cast<unsigned long long>(naive), 100.0 * static_cast<double>(planned) / static_cast<double>(naive));
  EXPECT_GE(planned, minimum);
  EXPECT_LE(planned, minimum + minimum / 20);
}

TEST(WindowLoadTest, FileReadsTheWindowGroupOfTheLastChunksOnly) {
  const Layout l = WindowSmall();
  PrefixPool pool("file", l, kWindowChunks);
  const uint64_t before = pool.store().Stats().tiers[0].bytes_read;
  ASSERT_EQ(pool.Load(), kWindowChunks);
  ExpectWindowLoad(pool, kWindowChunks, /*ranged=*/true);
  const StoreStats s = pool.store().Stats();
  const uint64_t skipped = 8 * (l.BytesPerChunk() / 2);  // chunks 0..7 hold none of tokens 512..639
  EXPECT_EQ(s.load_bytes, kWindowChunks * l.BytesPerChunk());
  EXPECT_EQ(s.load_bytes_skipped, skipped);
  EXPECT_EQ(s.tiers[0].bytes_read - before, kWindowChunks * l.BytesPerChunk() - skipped);
  EXPECT_NE(PrometheusText(s).find("\nkvtier_load_bytes_skipped_total " + std::to_string(skipped) + "\n"), std::string::npos);
}

TEST(WindowLoadTest, ProgressReportsARangedChunkWholeOnceRead) {
  const Layout l = WindowSmall();
  PrefixPool pool("file", l, kWindowChunks);
  size_t loaded = 0;
  const std::vector<uint64_t> landed = pool.LoadReporting(&loaded);
  ASSERT_EQ(loaded, kWindowChunks);
  ExpectWindowLoad(pool, kWindowChunks, /*ranged=*/true);
  for (size_t c = 0; c < kWindowChunks; ++c) EXPECT_EQ(landed[c], l.BytesPerChunk()) << "chunk " << c;
}

// fs:// has GetRanges' default (a verified whole read, then a copy of the ranges): the destination is
// spared the skipped bytes, storage is not.
TEST(WindowLoadTest, SharedPoolSkipsInTheDestinationOnly) {
  const Layout l = WindowSmall();
  PrefixPool pool("fs", l, kWindowChunks);
  ASSERT_EQ(pool.Load(), kWindowChunks);
  ExpectWindowLoad(pool, kWindowChunks, /*ranged=*/true);
  EXPECT_EQ(pool.store().Stats().load_bytes_skipped, 8 * (l.BytesPerChunk() / 2));
}

TEST(WindowLoadTest, MemReadsWholeChunks) {
  const Layout l = WindowSmall();
  PrefixPool pool("mem", l, kWindowChunks);
  ASSERT_EQ(pool.Load(), kWindowChunks);
  ExpectWindowLoad(pool, kWindowChunks, /*ranged=*/false);
  EXPECT_EQ(pool.store().Stats().load_bytes_skipped, 0u);
}

TEST(WindowLoadTest, AShorterPrefixReadsTheWindowItNeeds) {
  const Layout l = WindowSmall();
  for (size_t end : {size_t{6}, size_t{1}}) {
    SCOPED_TRACE("chunk " + std::to_string(end) + " lost");
    PrefixPool pool("file", l, kWindowChunks);
    ASSERT_TRUE(pool.store().Remove(pool.ns(), pool.keys().subspan(end, 1)).ok());
    // Planned for 10 chunks (windows of chunks 8, 9), loaded `end`: its own window's chunks read too.
    ASSERT_EQ(pool.Load(), end);
    ExpectWindowLoad(pool, end, /*ranged=*/true);
    const uint64_t skipped = (end >= 2 ? end - 2 : 0) * (l.BytesPerChunk() / 2);
    EXPECT_EQ(pool.store().Stats().load_bytes_skipped, skipped);
  }
}

}  // namespace
}  // namespace kvtier
