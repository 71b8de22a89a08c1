// Limits under load: concurrent random puts, gets and removes while another thread samples usage.
// Usage never exceeds capacity for mem:// and file://, and file:// stays within it across a restart,
// a smaller capacity at reopen included. Resident memory of a long run stays flat (no leak).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "kvtier/store.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

struct LoadFigures {
  uint64_t samples = 0, max_usage = 0, over = 0, ops = 0, wrong = 0;
  // Directory walks that summed to more than capacity. A walk is not atomic (it can count a file
  // just before its eviction and another one just published after it), so this is reported, and the
  // bytes on disk are asserted only when the tier is quiet.
  uint64_t walk_over = 0;
};

// Runs `threads` workers doing `ops` random operations each over a key space several times the
// capacity, while a sampler checks usage against capacity (and, for a directory, the bytes of the
// chunk files on disk).
LoadFigures RunLoad(Tier& tier, const std::string& dir, size_t threads, size_t ops) {
  const Namespace ns = MakeNamespace("load");
  const auto keys = Keys(ns, 400, 21);
  const uint64_t capacity = tier.Stats().capacity_bytes;
  LoadFigures fig;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0};
  std::thread sampler([&] {
    while (!stop) {
      const TierStats st = tier.Stats();
      ++fig.samples;
      fig.max_usage = std::max(fig.max_usage, st.usage_bytes);
      fig.over += st.usage_bytes > capacity;
      if (!dir.empty()) {
        uint64_t on_disk = 0;
        std::error_code ec;
        for (const auto& f : FilesUnder(dir, IsChunkName)) on_disk += std::filesystem::file_size(f, ec);
        fig.walk_over += on_disk > capacity;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<std::thread> workers;
  for (size_t w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(static_cast<unsigned>(w) + 1);
      for (size_t i = 0; i < ops; ++i) {
        const ChunkKey& k = keys[rng() % keys.size()];
        const unsigned op = rng() % 10;
        if (op < 5) {
          (void)PutExpected(tier, ns, k);
        } else if (op < 9) {
          const Status s = GetAndVerify(tier, ns, k);
          wrong += s.code() == Code::kInternal;  // only GetAndVerify's own "wrong bytes" code
        } else {
          (void)tier.Remove(ChunkId::Of(ns, k));
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  stop = true;
  sampler.join();
  fig.ops = threads * ops;
  fig.wrong = wrong;
  return fig;
}

TEST(Limits, MemUsageNeverAboveCapacityUnderLoad) {
  auto t = OpenTier("mem://?capacity=256KiB&page=4KiB");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const LoadFigures fig = RunLoad(**t, "", 4, Scaled(4000, 300));
  EXPECT_EQ(fig.over, 0u);
  EXPECT_EQ(fig.wrong, 0u);
  EXPECT_GT((*t)->Stats().evictions, 0u) << "the load never filled the tier";
  std::printf("[reliability] mem:// capacity %llu: %llu ops, %llu samples, max usage %llu\n",
              static_cast<unsigned long long>((*t)->Stats().capacity_bytes),
              static_cast<unsigned long long>(fig.ops), static_cast<unsigned long long>(fig.samples),
              static_cast<unsigned long long>(fig.max_usage));
}

TEST(Limits, FileUsageNeverAboveCapacityUnderLoadAndAcrossRestart) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/f";
  const uint64_t capacity = 256 * 1024;
  auto t = OpenTier("file://" + dir + "?capacity=" + std::to_string(capacity));
  if (!t.ok() && t.status().code() == Code::kInvalidArgument) GTEST_SKIP() << t.status().ToString();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const LoadFigures fig = RunLoad(**t, dir, 4, Scaled(2000, 200));
  EXPECT_EQ(fig.over, 0u);
  EXPECT_EQ(fig.wrong, 0u);
  EXPECT_GT((*t)->Stats().evictions, 0u);
  uint64_t quiet_on_disk = 0;
  for (const auto& f : FilesUnder(dir, IsChunkName)) quiet_on_disk += std::filesystem::file_size(f);
  EXPECT_LE(quiet_on_disk, capacity);
  EXPECT_EQ(quiet_on_disk, (*t)->Stats().usage_bytes);
  const uint64_t chunks_before = (*t)->Stats().chunks;
  t = Status::Internal("closed");  // closes the tier
  // Same capacity: everything comes back, within the limit.
  auto again = OpenTier("file://" + dir + "?capacity=" + std::to_string(capacity));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Stats().chunks, chunks_before);
  EXPECT_LE((*again)->Stats().usage_bytes, capacity);
  again = Status::Internal("closed");
  // Half the capacity at restart: the tier evicts down to it at open.
  auto half = OpenTier("file://" + dir + "?capacity=" + std::to_string(capacity / 2));
  ASSERT_TRUE(half.ok());
  const TierStats st = (*half)->Stats();
  EXPECT_LE(st.usage_bytes, capacity / 2);
  uint64_t on_disk = 0;
  for (const auto& f : FilesUnder(dir, IsChunkName)) on_disk += std::filesystem::file_size(f);
  EXPECT_LE(on_disk, capacity / 2);
  EXPECT_EQ(st.usage_bytes, on_disk) << "usage and the files on disk disagree";
  std::printf("[reliability] file:// capacity %llu: %llu ops, %llu samples, max usage %llu, "
              "%llu racy directory walks over; after restart at half capacity: %llu bytes on disk\n",
              static_cast<unsigned long long>(capacity), static_cast<unsigned long long>(fig.ops),
              static_cast<unsigned long long>(fig.samples),
              static_cast<unsigned long long>(fig.max_usage),
              static_cast<unsigned long long>(fig.walk_over),
              static_cast<unsigned long long>(on_disk));
}

// A long run of saves and loads through a Store with evicting tiers: resident memory after the
// warm-up must stay flat. Measured from /proc/self/statm; sanitizer builds (whose allocators keep
// freed memory in quarantine) report the figures without judging them.
TEST(Limits, ResidentMemoryStaysFlatOverALongRun) {
  TempDir tmp;
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=4MiB"};
  if (OpenTier("file://" + tmp.path() + "/probe").ok()) {
    opt.tiers.push_back("file://" + tmp.path() + "/f?capacity=8MiB");
  }
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const Namespace ns = MakeNamespace("rss");
  const size_t rounds = Scaled(6000, 500), batch = 8;
  uint64_t warm = 0, peak_after_warm = 0;
  LoadBuffers dst(batch, ns.layout().BytesPerChunk());
  for (size_t r = 0; r < rounds; ++r) {
    const auto keys = Keys(ns, batch, static_cast<uint32_t>(r));  // always new keys: evictions run
    SaveSources src(ns, keys);
    ASSERT_TRUE((*store)->Save(ns, keys, src.srcs).ok());
    auto n = (*store)->Load(ns, keys, dst.dsts);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(dst.CountExact(ns, keys, *n), *n);
    if (r == rounds / 5) {
      ASSERT_TRUE((*store)->Flush().ok());
      warm = ResidentBytes();
    }
    if (r > rounds / 5) peak_after_warm = std::max(peak_after_warm, ResidentBytes());
  }
  ASSERT_TRUE((*store)->Flush().ok());
  const uint64_t end = ResidentBytes();
  const double chunks_mib = static_cast<double>(rounds * batch * ns.layout().BytesPerChunk()) / (1 << 20);
  std::printf("[reliability] RSS over %zu rounds (%.0f MiB saved): after warm-up %.1f MiB, peak %.1f "
              "MiB, end %.1f MiB\n",
              rounds, chunks_mib, warm / 1048576.0, peak_after_warm / 1048576.0, end / 1048576.0);
  if (UnderSanitizer()) return;
  // Far less than the data that went through (the run saves ~chunks_mib); 8 MiB covers allocator
  // and page-cache noise.
  EXPECT_LT(peak_after_warm, warm + (8u << 20)) << "resident memory grows: a leak";
}

}  // namespace
}  // namespace kvtier::reltest
