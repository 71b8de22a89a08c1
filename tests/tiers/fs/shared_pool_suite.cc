// The shared-pool suite: engine processes on two paths of one pool (two hosts of one shared
// filesystem) with gc beside them. Instantiated on a local directory (tests/tiers/fs/multiprocess_test.cc)
// and across two CephFS mounts (tests/tiers/ceph/cephfs_pool_test.cc); see pool_pair.h.
//   - cross-instance: a process saves a prompt through A, a later one on B finds and loads it;
//   - readers, writers and gc on both paths at once: no wrong or torn chunk, gc keeps its bound;
//   - crash cycles: a writer on A is killed mid-save; through B every visible chunk reads back
//     verified, and gc through B removes every leftover of the dead writer;
//   - hot names: two writers, one per path, publish the same chunks at the same moment while gc runs:
//     every published name keeps the file (inode) it was first published with.
#include "tiers/fs/pool_pair.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "core/chunk_format.h"
#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_gc.h"
#include "tiers/fs/pool_layout.h"

namespace kvtier::fstest {

PoolPairSource LocalPoolPairs() {
  PoolPairSource src;
  src.name = "Local";
  src.make = [](const std::string& test) {
    auto dir = std::make_shared<TempDir>();
    PoolPair p;
    if (!dir->ok()) {
      p.skip = "no temporary directory";
      return p;
    }
    p.a = p.b = dir->path() + "/" + test + "/pool";
    p.scratch = dir->path();
    p.keep = dir;
    return p;
  };
  return src;
}

void SharedPoolSuite::SetUp() {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  pair_ = GetParam().make(test.substr(0, test.find('/')));
  if (!pair_.skip.empty()) GTEST_SKIP() << pair_.skip;
  ASSERT_FALSE(pair_.a.empty()) << "no pool pair: the cluster did not start (see above)";
  std::filesystem::create_directories(pair_.scratch);
}

long long ExpectCleanMixWorkers(const std::vector<Child>& workers, const std::function<std::string(size_t)>& where) {
  long long hits = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    const ChildResult r = Wait(workers[w]);
    EXPECT_TRUE(r.exited) << "worker " << w << " (" << where(w) << ") crashed: " << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Field(r.output, "mismatches"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "torn"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "put_errors"), 0) << r.output;
    hits += std::max(0LL, Field(r.output, "hits"));
    std::cout << "[pool] worker " << w << " (" << where(w) << "): " << r.output;
  }
  return hits;
}

namespace {

uint64_t PoolBytes(const std::string& root, uint64_t* temps = nullptr) {
  uint64_t total = 0;
  auto pool = internal::OpenPool(root, internal::ChunkDirOptions{.read_only = true});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  if (!pool.ok()) return total;
  EXPECT_TRUE((*pool)->Walk([&](const internal::WalkEntry& e) {
    if (e.kind == internal::EntryKind::kChunk || e.kind == internal::EntryKind::kTemp) total += e.stat.size;
    if (temps != nullptr && e.kind == internal::EntryKind::kTemp) ++*temps;
    return true;
  }).ok());
  return total;
}

// Waits until `c` has printed `line` (true), or has exited or `limit` passed (false).
bool WaitForLine(const Child& c, const std::string& line, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(c.output_path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(line) != std::string::npos) return true;
    if (::kill(c.pid, 0) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// "ino <i> <inode>" lines of a racer's output.
std::map<size_t, unsigned long long> Inodes(const std::string& output) {
  std::map<size_t, unsigned long long> out;
  std::istringstream in(output);
  std::string word;
  size_t i;
  unsigned long long ino;
  while (in >> word) {
    if (word == "ino" && in >> i >> ino) out[i] = ino;
  }
  return out;
}

Child StartGc(const PoolPair& p, uint64_t max_bytes, const std::string& stop) {
  std::filesystem::remove(stop);
  return Spawn({FS_POOL_WORKER, "gc", p.b, std::to_string(max_bytes), stop}, p.scratch + "/gc.out");
}

ChildResult StopGc(const Child& gc, const std::string& stop) {
  std::ofstream(stop) << "stop";
  return Wait(gc);
}

}  // namespace

// Process A saves a long prompt through its Store on path A; process B, started afterwards on path
// B with its own empty memory tier, finds every chunk with Lookup and loads the right bytes.
TEST_P(SharedPoolSuite, PromptSavedThroughAIsFoundAndLoadedThroughB) {
  const size_t n = GetParam().prompt_chunks;
  const ChildResult a = Wait(Spawn({FS_POOL_WORKER, "save", pair_.a, std::to_string(n)}, pair_.scratch + "/a.out"));
  ASSERT_TRUE(a.exited) << a.output;
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(Field(a.output, "in_pool"), static_cast<long long>(n)) << a.output;

  const ChildResult b = Wait(Spawn({FS_POOL_WORKER, "load", pair_.b, std::to_string(n)}, pair_.scratch + "/b.out"));
  ASSERT_TRUE(b.exited) << b.output;
  EXPECT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(Field(b.output, "found"), static_cast<long long>(n)) << b.output;
  EXPECT_EQ(Field(b.output, "loaded"), static_cast<long long>(n)) << b.output;
  EXPECT_EQ(Field(b.output, "mismatches"), 0) << b.output;
  EXPECT_EQ(Field(b.output, "mem_hits"), 0) << b.output;  // B's memory started empty
  EXPECT_EQ(Field(b.output, "promotions"), static_cast<long long>(n)) << b.output;
  // Each chunk read from the pool twice: by the Load, then by its promotion job after Load returned.
  EXPECT_EQ(Field(b.output, "pool_hits"), static_cast<long long>(2 * n)) << b.output;
  std::cout << "[pool] A: " << a.output << "[pool] B: " << b.output;
}

// Workers on both paths share the pool while gc runs through B under a bound well below what they
// use, so it evicts while they read: every load must be the bytes that were saved.
TEST_P(SharedPoolSuite, WorkersOnBothPathsAndGcNeverSeeWrongBytes) {
  const auto first = Wait(Spawn({FS_POOL_WORKER, "mix", pair_.a, "9", "1"}, pair_.scratch + "/init.out"));
  ASSERT_TRUE(first.exited && first.exit_code == 0) << first.output;  // the pool, created through A
  const uint64_t stored = internal::StoredChunkBytes(TestNamespace().layout().BytesPerChunk());
  const uint64_t max_bytes = 24 * stored;  // the workers use ~112 chunks
  const std::string stop = pair_.scratch + "/stop";
  const Child gc = StartGc(pair_, max_bytes, stop);
  ASSERT_GT(gc.pid, 0);
  std::vector<Child> workers;
  for (int w = 0; w < GetParam().workers; ++w) {
    workers.push_back(Spawn({FS_POOL_WORKER, "mix", w % 2 == 0 ? pair_.a : pair_.b, std::to_string(w),
                             std::to_string(GetParam().ops_per_worker)},
                            pair_.scratch + "/w" + std::to_string(w) + ".out"));
    ASSERT_GT(workers.back().pid, 0);
  }
  const long long hits = ExpectCleanMixWorkers(workers, [](size_t w) { return w % 2 == 0 ? "A" : "B"; });
  const ChildResult g = StopGc(gc, stop);
  ASSERT_TRUE(g.exited) << "gc crashed: " << g.output;
  EXPECT_EQ(g.exit_code, 0) << g.output;
  EXPECT_GT(Field(g.output, "passes"), 0) << g.output;
  EXPECT_GT(hits, 0);  // loads really happened, so the byte check above means something

  auto last = internal::CollectPoolGarbage(pair_.b, internal::GcOptions{.max_bytes = max_bytes});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_LE(PoolBytes(pair_.b), max_bytes);
}

// A writer on A is killed with SIGKILL at a random moment of saving; then, through B: every chunk the
// pool lists reads back verified with exactly the bytes saved, and gc removes every temporary the
// dead writer left (it is gone, so none is live), leaving exactly the listed chunks.
TEST_P(SharedPoolSuite, KilledWriterOnALeavesOnlyVerifiedChunksSeenThroughB) {
  std::mt19937_64 rng(20261201);
  const Namespace ns = TestNamespace();
  const size_t bytes = ns.layout().BytesPerChunk();
  uint64_t verified = 0, temps_removed = 0;
  for (size_t c = 0; c < GetParam().crash_cycles; ++c) {
    SCOPED_TRACE("cycle " + std::to_string(c));
    // A fresh pool per cycle keeps the checks bounded (every chunk is read back through B, which on
    // CephFS recalls the writer mount's capabilities one file at a time).
    const std::string a = pair_.a + std::to_string(c), b = pair_.b + std::to_string(c);
    const Child w = Spawn({FS_POOL_WORKER, "crash", a, std::to_string(rng() % 1000000)},
                          pair_.scratch + "/crash.out");
    ASSERT_GT(w.pid, 0);
    const bool ready = WaitForLine(w, "ready");
    if (ready) std::this_thread::sleep_for(std::chrono::microseconds(rng() % (GetParam().crash_run_ms * 1000ull)));
    ::kill(w.pid, SIGKILL);
    const ChildResult r = Wait(w);
    ASSERT_TRUE(ready) << "crash writer did not start: " << r.output;
    EXPECT_FALSE(r.exited) << "crash writer exited by itself: " << r.output;

    auto tier = OpenTier("fs://" + b);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    std::vector<ChunkInfo> listed;
    ASSERT_TRUE((*tier)->List([&](const ChunkInfo& i) {
                          listed.push_back(i);
                          return true;
                        }).ok());
    std::vector<std::byte> got(bytes);
    for (const ChunkInfo& info : listed) {
      ChunkId id = info.id;
      if (id.layout_fingerprint == 0) id.layout_fingerprint = ns.layout().Fingerprint();
      const Status s = (*tier)->Get(id, OnePiece(got).dst());
      ASSERT_TRUE(s.ok()) << id.key.Hex() << " is listed but does not read back: " << s.ToString();
      ASSERT_TRUE(got == PayloadFor(id.key, bytes)) << "wrong bytes for " << id.key.Hex();
      ++verified;
    }
    EXPECT_EQ((*tier)->Stats().corrupt, 0u);
    uint64_t temps = 0;
    PoolBytes(b, &temps);
    auto gc = internal::CollectPoolGarbage(b, internal::GcOptions{.max_bytes = 1ull << 40,
                                                                        .grace = std::chrono::seconds(0)});
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    EXPECT_EQ(gc->temps_removed, temps);
    EXPECT_EQ(gc->chunks_after, listed.size());
    EXPECT_EQ(gc->chunks_evicted, 0u);
    uint64_t left = 0;
    PoolBytes(b, &left);
    EXPECT_EQ(left, 0u) << "gc left temporaries in the pool";
    temps_removed += temps;
  }
  EXPECT_GT(verified, 0u);  // the writer really saved, so the checks above mean something
  std::cout << "[pool] crash cycles: " << GetParam().crash_cycles << ", chunks verified through B: " << verified
            << ", leftover temporaries removed: " << temps_removed << "\n";
}

// Two writers, one on each path, publish the same new chunks in the same order at the same moment
// while gc (through B, with room for all) runs: each records the inode of every name right after its
// Put. A name renamed over by the second writer would show two inodes; every name must show one, the
// one it still has at the end, and gc must have rewritten (evicted) nothing.
TEST_P(SharedPoolSuite, RacingWritersOnBothPathsNeverReplaceAPublishedName) {
  const auto first = Wait(Spawn({FS_POOL_WORKER, "mix", pair_.a, "9", "1"}, pair_.scratch + "/init.out"));
  ASSERT_TRUE(first.exited && first.exit_code == 0) << first.output;
  const std::string stop = pair_.scratch + "/stop", go = pair_.scratch + "/go";
  std::filesystem::remove(go);
  const Child gc = StartGc(pair_, 1ull << 40, stop);
  const size_t n = GetParam().race_chunks;
  const uint32_t seed = 777;
  const Child ra = Spawn({FS_POOL_WORKER, "race", pair_.a, std::to_string(seed), std::to_string(n), go},
                         pair_.scratch + "/race-a.out");
  const Child rb = Spawn({FS_POOL_WORKER, "race", pair_.b, std::to_string(seed), std::to_string(n), go},
                         pair_.scratch + "/race-b.out");
  const bool ready = WaitForLine(ra, "ready") && WaitForLine(rb, "ready");
  std::ofstream(go) << "go";
  const ChildResult a = Wait(ra), b = Wait(rb);
  const ChildResult g = StopGc(gc, stop);
  ASSERT_TRUE(ready) << a.output << b.output;
  ASSERT_TRUE(a.exited && a.exit_code == 0) << a.output;
  ASSERT_TRUE(b.exited && b.exit_code == 0) << b.output;
  ASSERT_TRUE(g.exited && g.exit_code == 0) << g.output;
  EXPECT_EQ(Field(g.output, "evicted"), 0) << g.output;
  const auto ino_a = Inodes(a.output), ino_b = Inodes(b.output);
  ASSERT_EQ(ino_a.size(), n);
  ASSERT_EQ(ino_b.size(), n);
  const Namespace ns = TestNamespace();
  const auto keys = TestKeys(ns, n, seed);
  size_t replaced = 0;
  for (size_t i = 0; i < n; ++i) {
    struct stat st;
    ASSERT_EQ(::stat(internal::PoolChunkPathForTesting(pair_.b, ChunkId::Of(ns, keys[i])).c_str(), &st), 0);
    const unsigned long long now = st.st_ino;
    if (ino_a.at(i) != now || ino_b.at(i) != now) {
      ++replaced;
      ADD_FAILURE() << "chunk " << i << " was replaced: A saw inode " << ino_a.at(i) << ", B saw " << ino_b.at(i)
                    << ", it has " << now;
    }
  }
  EXPECT_EQ(replaced, 0u);
  std::cout << "[pool] racing writers: " << n << " chunks published from both paths at once, names replaced: "
            << replaced << "\n";
}

}  // namespace kvtier::fstest
