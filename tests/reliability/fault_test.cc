// Faults from the storage below the Store (through FaultTier, src/testing/fault_tier.h): EIO on read
// or write, short reads, ENOSPC, added latency. The Store must turn them into misses and counted
// dropped saves, never into wrong bytes or a crash, and must serve again once the fault stops.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "kvtier/store.h"
#include "reliability/test_util.h"
#include "testing/fault_tier.h"

namespace kvtier::reltest {
namespace {

using internal::FaultControls;
using internal::WrapWithFaults;

std::unique_ptr<Tier> MustOpen(const std::string& url) {
  auto t = OpenTier(url);
  EXPECT_TRUE(t.ok()) << url << ": " << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// A Store over [mem://, FaultTier(lower)]; `lower` is file:// in a temp dir when available, else a
// second mem:// (the Store then writes it synchronously; the counting tests below need file://).
struct FaultyStore {
  std::unique_ptr<Store> store;
  std::shared_ptr<FaultControls> faults;
};

FaultyStore OpenFaulty(const std::string& lower_url, bool with_top, bool promote = true,
                       const std::string& top_url = "mem://?capacity=4MiB") {
  FaultyStore fs;
  std::vector<std::unique_ptr<Tier>> tiers;
  if (with_top) tiers.push_back(MustOpen(top_url));
  auto lower = MustOpen(lower_url);
  if (lower == nullptr) return fs;
  tiers.push_back(WrapWithFaults(std::move(lower), &fs.faults));
  StoreOptions opt;
  opt.promote_on_load = promote;
  auto s = Store::Open(std::move(tiers), opt);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) fs.store = std::move(s).value();
  return fs;
}

bool HaveFileTier(const std::string& dir) {
  auto t = OpenTier("file://" + dir);
  return t.ok();
}

TEST(FaultTier, EachFaultGivesItsStatusAndClears) {
  std::shared_ptr<FaultControls> c;
  auto tier = WrapWithFaults(MustOpen("mem://?capacity=1MiB"), &c);
  const Namespace ns = MakeNamespace("t");
  const auto keys = Keys(ns, 2, 1);
  c->no_space = true;
  EXPECT_TRUE(PutExpected(*tier, ns, keys[0]).IsNoSpace());
  c->no_space = false;
  c->write_error = true;
  EXPECT_EQ(PutExpected(*tier, ns, keys[0]).code(), Code::kIOError);
  c->write_error = false;
  ASSERT_TRUE(PutExpected(*tier, ns, keys[0]).ok());
  c->read_error = true;
  EXPECT_EQ(GetAndVerify(*tier, ns, keys[0]).code(), Code::kIOError);
  EXPECT_FALSE(tier->Contains(ChunkId::Of(ns, keys[0])));
  c->ClearFaults();
  c->short_read = true;
  EXPECT_EQ(GetAndVerify(*tier, ns, keys[0]).code(), Code::kIOError);
  c->ClearFaults();
  c->read_delay_us = 2000;
  EXPECT_TRUE(GetAndVerify(*tier, ns, keys[0]).ok());
  c->ClearFaults();
  EXPECT_TRUE(GetAndVerify(*tier, ns, keys[0]).ok());
  EXPECT_EQ(c->InjectedTotal(), 4u);
}

TEST(StoreFaults, FailingTopTierFailsTheSaveAndMisses) {
  FaultyStore fs = OpenFaulty("mem://?capacity=1MiB", /*with_top=*/false);
  ASSERT_TRUE(fs.store);
  const Namespace ns = MakeNamespace("t");
  const auto keys = Keys(ns, 4, 2);
  SaveSources src(ns, keys);
  fs.faults->write_error = true;
  EXPECT_FALSE(fs.store->Save(ns, keys, src.srcs).ok());
  EXPECT_EQ(fs.store->Lookup(ns, keys), 0u);
  LoadBuffers dst(keys.size(), ns.layout().BytesPerChunk());
  auto n = fs.store->Load(ns, keys, dst.dsts);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  fs.faults->ClearFaults();  // recovery
  ASSERT_TRUE(fs.store->Save(ns, keys, src.srcs).ok());
  n = fs.store->Load(ns, keys, dst.dsts);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, keys.size());
  EXPECT_EQ(dst.CountExact(ns, keys, *n), *n);
}

TEST(StoreFaults, LowerTierWriteFaultsAreCountedDrops) {
  TempDir tmp;
  if (!HaveFileTier(tmp.path() + "/probe")) GTEST_SKIP() << "file:// tier not built";
  FaultyStore fs = OpenFaulty("file://" + tmp.path() + "/f", /*with_top=*/true);
  ASSERT_TRUE(fs.store);
  const Namespace ns = MakeNamespace("t");
  const auto keys = Keys(ns, 30, 3);
  uint64_t expected_drops = 0;
  for (int mode = 0; mode < 3; ++mode) {  // EIO, ENOSPC, then healthy again
    fs.faults->write_error = mode == 0;
    fs.faults->no_space = mode == 1;
    const std::span<const ChunkKey> part(keys.data() + mode * 10, 10);
    SaveSources src(ns, part);
    EXPECT_TRUE(fs.store->Save(ns, part, src.srcs).ok()) << "a lower tier's fault reached the caller";
    ASSERT_TRUE(fs.store->Flush().ok());
    if (mode < 2) expected_drops += part.size();
    EXPECT_EQ(fs.store->Stats().dropped_saves, expected_drops) << "mode " << mode;
    LoadBuffers dst(part.size(), ns.layout().BytesPerChunk());
    auto n = fs.store->Load(ns, part, dst.dsts);  // served from the top tier all along
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, part.size());
    EXPECT_EQ(dst.CountExact(ns, part, *n), *n);
  }
  EXPECT_EQ(fs.faults->injected_write_errors + fs.faults->injected_no_space, 20u);
  // After recovery the lower tier holds exactly the chunks saved while it was healthy.
  Tier& lower = fs.store->tier(1);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(lower.Contains(ChunkId::Of(ns, keys[i])), i >= 20) << i;
  }
}

TEST(StoreFaults, ReadFaultsBecomeMissesThenRecover) {
  TempDir tmp;
  const std::string url = "file://" + tmp.path() + "/f";
  if (!HaveFileTier(tmp.path() + "/probe")) GTEST_SKIP() << "file:// tier not built";
  const Namespace ns = MakeNamespace("t");
  const auto keys = Keys(ns, 12, 4);
  {
    auto t = MustOpen(url);
    ASSERT_TRUE(t);
    for (const auto& k : keys) ASSERT_TRUE(PutExpected(*t, ns, k).ok());
  }
  // An empty top tier and no promotion: every load goes to the faulty lower tier.
  FaultyStore fs = OpenFaulty(url, /*with_top=*/true, /*promote=*/false);
  ASSERT_TRUE(fs.store);
  LoadBuffers dst(keys.size(), ns.layout().BytesPerChunk());
  auto load = [&] {
    auto n = fs.store->Load(ns, keys, dst.dsts);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    const size_t got = n.ok() ? *n : 0;
    EXPECT_EQ(dst.CountExact(ns, keys, got), got) << "wrong bytes in the loaded prefix";
    return got;
  };
  fs.faults->read_error = true;
  EXPECT_EQ(fs.store->Lookup(ns, keys), 0u);
  EXPECT_EQ(load(), 0u);
  fs.faults->ClearFaults();
  fs.faults->short_read = true;
  EXPECT_EQ(load(), 0u);
  fs.faults->ClearFaults();
  fs.faults->read_delay_us = 3000;
  EXPECT_EQ(load(), keys.size());
  fs.faults->ClearFaults();
  EXPECT_EQ(load(), keys.size());
  EXPECT_EQ(fs.store->Stats().tiers[1].corrupt, 0u) << "an I/O fault was mistaken for corruption";
}

// Faults switched on and off at random while threads load and save: every loaded prefix is exact.
TEST(StoreFaults, FlappingFaultsNeverYieldWrongBytes) {
  TempDir tmp;
  const bool file = HaveFileTier(tmp.path() + "/probe");
  // A top tier of 16 chunks under a key space of 64: most loads go to the faulty lower tier.
  FaultyStore fs = OpenFaulty(file ? "file://" + tmp.path() + "/f" : "mem://?capacity=2MiB",
                              /*with_top=*/true, /*promote=*/true, "mem://?capacity=32KiB&page=2KiB");
  ASSERT_TRUE(fs.store);
  const Namespace ns = MakeNamespace("t");
  const auto keys = Keys(ns, 64, 5);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> loaded{0}, wrong{0}, short_loads{0};
  std::thread chaos([&] {
    std::mt19937 rng(9);
    while (!stop) {
      fs.faults->read_error = rng() % 4 == 0;
      fs.faults->short_read = rng() % 4 == 0;
      fs.faults->write_error = rng() % 4 == 0;
      fs.faults->no_space = rng() % 4 == 0;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  const size_t iters = Scaled(300, 30);
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(w);
      LoadBuffers dst(8, ns.layout().BytesPerChunk());
      for (size_t i = 0; i < iters; ++i) {
        const size_t start = rng() % (keys.size() - 8);
        const std::span<const ChunkKey> part(keys.data() + start, 8);
        if (rng() % 2 == 0) {
          SaveSources src(ns, part);
          (void)fs.store->Save(ns, part, src.srcs);
        } else {
          auto n = fs.store->Load(ns, part, dst.dsts);
          if (!n.ok()) continue;
          loaded += *n;
          short_loads += *n < part.size();
          wrong += *n - dst.CountExact(ns, part, *n);
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  stop = true;
  chaos.join();
  EXPECT_EQ(wrong.load(), 0u);
  fs.faults->ClearFaults();
  ASSERT_TRUE(fs.store->Flush().ok());
  const StoreStats st = fs.store->Stats();
  EXPECT_LE(st.dropped_saves + st.queued_saves, st.save_chunks);
  std::printf("[reliability] flapping faults: %llu faults injected, %llu chunks loaded (%llu loads cut "
              "short), %llu wrong, %llu saves dropped\n",
              static_cast<unsigned long long>(fs.faults->InjectedTotal()),
              static_cast<unsigned long long>(loaded.load()),
              static_cast<unsigned long long>(short_loads.load()),
              static_cast<unsigned long long>(wrong.load()),
              static_cast<unsigned long long>(st.dropped_saves));
}

}  // namespace
}  // namespace kvtier::reltest
