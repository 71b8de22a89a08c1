// fs_pool_worker: one process of the multi-process fs:// tests, started (fork + exec) by them.
//
//   fs_pool_worker mix  POOL WORKER OPS   saves and loads shared and private keys; checks every load
//   fs_pool_worker gc   POOL MAX_BYTES STOP_FILE   runs gc passes until STOP_FILE exists
//   fs_pool_worker save POOL CHUNKS       a Store (own mem:// over the pool) saves a long prompt
//   fs_pool_worker load POOL CHUNKS       a fresh Store (own, empty mem://) looks the prompt up, loads it
//   fs_pool_worker crash POOL SEED        prints "ready" once the tier is open, then saves fresh chunks
//                                         until it is killed (the crash-cycle victim)
//   fs_pool_worker race POOL SEED COUNT GO_FILE   once GO_FILE exists, saves COUNT chunks in order and
//                                         after each prints "ino <i> <inode of the published file>"
//
// Prints one "key=value ..." summary line. Exit status: 0 clean, 3 a wrong or torn chunk was seen,
// 2 bad usage or setup failure. Payloads derive from the key, so any process can check any load.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_gc.h"
#include "kvtier/store.h"

namespace kvtier::fstest {
namespace {

constexpr size_t kSharedKeys = 48;   // used by every worker
constexpr size_t kPrivateKeys = 16;  // per worker

// The pool as a bare tier: misses forgotten quickly and every hit touched, so gc sees real recency.
Result<std::unique_ptr<Tier>> OpenPoolTier(const std::string& pool) {
  auto url = TierUrl::Parse("fs://" + pool + "?neg_ttl_ms=20&touch_s=0");
  return url.ok() ? internal::OpenFsTier(*url) : Result<std::unique_ptr<Tier>>(url.status());
}

int Mix(const std::string& pool, uint32_t worker, uint64_t ops) {
  auto tier = OpenPoolTier(pool);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 2;
  }
  const Namespace ns = TestNamespace();
  const auto shared = TestKeys(ns, kSharedKeys, 1);
  const auto mine = TestKeys(ns, kPrivateKeys, 1000 + worker);
  const size_t bytes = ns.layout().BytesPerChunk();
  std::vector<std::byte> out(bytes);
  uint64_t state = 0x1234 + worker, puts = 0, put_errors = 0, hits = 0, misses = 0, wrong = 0, torn = 0;
  for (uint64_t n = 0; n < ops; ++n) {
    const uint64_t r = SplitMix(state);
    const ChunkKey& key = (r & 3) == 0 ? mine[(r >> 8) % mine.size()] : shared[(r >> 8) % shared.size()];
    const ChunkId id = ChunkId::Of(ns, key);
    if ((r >> 4) % 5 < 2) {
      auto data = PayloadFor(key, bytes);
      const Status s = (*tier)->Put(id, OnePiece(data).src());
      (s.ok() ? puts : put_errors)++;
      continue;
    }
    std::fill(out.begin(), out.end(), std::byte{0});
    const Status s = (*tier)->Get(id, OnePiece(out).dst());
    if (s.ok()) {
      hits++;
      if (out != PayloadFor(key, bytes)) wrong++;
    } else if (s.IsCorruption()) {
      torn++;
      std::fprintf(stderr, "worker %u: %s\n", worker, s.ToString().c_str());
    } else {
      misses++;
    }
  }
  std::printf("worker=%u puts=%llu put_errors=%llu hits=%llu misses=%llu mismatches=%llu torn=%llu\n", worker,
              (unsigned long long)puts, (unsigned long long)put_errors, (unsigned long long)hits,
              (unsigned long long)misses, (unsigned long long)wrong, (unsigned long long)torn);
  return wrong == 0 && torn == 0 ? 0 : 3;
}

int Gc(const std::string& pool, uint64_t max_bytes, const std::string& stop_file) {
  uint64_t passes = 0, evicted = 0, busy = 0;
  struct stat st;
  while (::stat(stop_file.c_str(), &st) != 0) {
    auto r = internal::CollectPoolGarbage(pool, internal::GcOptions{.max_bytes = max_bytes});
    if (r.ok()) {
      passes++;
      evicted += r->chunks_evicted;
    } else if (r.status().code() == Code::kBusy) {
      busy++;
    } else {
      std::fprintf(stderr, "gc: %s\n", r.status().ToString().c_str());
      return 2;
    }
    ::usleep(2000);
  }
  std::printf("gc passes=%llu evicted=%llu busy=%llu\n", (unsigned long long)passes,
              (unsigned long long)evicted, (unsigned long long)busy);
  return 0;
}

int Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return 2;
}

// The Store of one engine instance: its own memory tier over the shared pool.
Result<std::unique_ptr<Store>> OpenInstance(const std::string& pool) {
  StoreOptions o;
  o.tiers = {"mem://?capacity=64MiB", "fs://" + pool};
  return Store::Open(o);
}

// The long prompt both instances share: its chunk keys (seed fixed) and its payloads.
constexpr uint32_t kPromptSeed = 4242;

int Save(const std::string& pool, size_t chunks) {
  auto store = OpenInstance(pool);
  if (!store.ok()) return Fail("open", store.status());
  const Namespace ns = TestNamespace();
  const auto keys = TestKeys(ns, chunks, kPromptSeed);
  const size_t bytes = ns.layout().BytesPerChunk();
  std::vector<std::vector<std::byte>> data;
  std::vector<std::span<const std::byte>> pieces;
  for (const ChunkKey& k : keys) data.push_back(PayloadFor(k, bytes));
  for (const auto& d : data) pieces.emplace_back(d);
  std::vector<GatherList> srcs;
  for (const auto& p : pieces) srcs.emplace_back(&p, 1);
  Status s = (*store)->Save(ns, keys, srcs);
  if (s.ok()) s = (*store)->Flush();  // the background copy into the pool has finished
  if (!s.ok()) return Fail("save", s);
  size_t in_pool = 0;
  for (const ChunkKey& k : keys) in_pool += (*store)->tier(1).Contains(ChunkId::Of(ns, k)) ? 1 : 0;
  std::printf("saver saved=%zu in_pool=%zu\n", keys.size(), in_pool);
  return 0;
}

int Load(const std::string& pool, size_t chunks) {
  auto store = OpenInstance(pool);
  if (!store.ok()) return Fail("open", store.status());
  const Namespace ns = TestNamespace();
  const auto keys = TestKeys(ns, chunks, kPromptSeed);
  const size_t bytes = ns.layout().BytesPerChunk();
  const size_t found = (*store)->Lookup(ns, keys);
  std::vector<std::vector<std::byte>> out(found, std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> pieces(out.begin(), out.end());
  std::vector<ScatterList> dsts;
  for (const auto& p : pieces) dsts.emplace_back(&p, 1);
  auto loaded = (*store)->Load(ns, std::span(keys).first(found), dsts);
  if (!loaded.ok()) return Fail("load", loaded.status());
  size_t wrong = 0;
  for (size_t i = 0; i < *loaded; ++i) wrong += out[i] != PayloadFor(keys[i], bytes) ? 1 : 0;
  // Promotion into this instance's memory runs in the background after Load, reading each chunk from
  // the pool once more: wait for it, so the counts below are final.
  if (Status f = (*store)->Flush(); !f.ok()) return Fail("flush", f);
  const StoreStats st = (*store)->Stats();
  std::printf("loader found=%zu loaded=%zu mismatches=%zu mem_hits=%llu pool_hits=%llu promotions=%llu\n", found,
              *loaded, wrong, (unsigned long long)st.tiers[0].hits, (unsigned long long)st.tiers[1].hits,
              (unsigned long long)st.promotions);
  return wrong == 0 ? 0 : 3;
}

int Crash(const std::string& pool, uint32_t seed) {
  auto tier = OpenPoolTier(pool);
  if (!tier.ok()) return Fail("open", tier.status());
  std::printf("ready\n");
  std::fflush(stdout);
  const Namespace ns = TestNamespace();
  const auto keys = TestKeys(ns, 4096, seed);
  const size_t bytes = ns.layout().BytesPerChunk();
  for (size_t i = 0;; i = (i + 1) % keys.size()) {
    auto data = PayloadFor(keys[i], bytes);
    (void)(*tier)->Put(ChunkId::Of(ns, keys[i]), OnePiece(data).src());
  }
}

int Race(const std::string& pool, uint32_t seed, size_t count, const std::string& go_file) {
  auto tier = OpenPoolTier(pool);
  if (!tier.ok()) return Fail("open", tier.status());
  const Namespace ns = TestNamespace();
  const auto keys = TestKeys(ns, count, seed);
  const size_t bytes = ns.layout().BytesPerChunk();
  std::printf("ready\n");
  std::fflush(stdout);
  struct stat st;
  while (::stat(go_file.c_str(), &st) != 0) ::usleep(200);  // start together with the other racer
  uint64_t errors = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const ChunkId id = ChunkId::Of(ns, keys[i]);
    auto data = PayloadFor(keys[i], bytes);
    if (!(*tier)->Put(id, OnePiece(data).src()).ok() ||
        ::stat(internal::PoolChunkPathForTesting(pool, id).c_str(), &st) != 0) {
      errors++;
      continue;
    }
    std::printf("ino %zu %llu\n", i, (unsigned long long)st.st_ino);
  }
  std::printf("racer saved=%zu errors=%llu\n", keys.size(), (unsigned long long)errors);
  return errors == 0 ? 0 : 2;
}

}  // namespace
}  // namespace kvtier::fstest

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mix" && argc == 5) {
    return kvtier::fstest::Mix(argv[2], static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)),
                               std::strtoull(argv[4], nullptr, 10));
  }
  if (mode == "gc" && argc == 5) {
    return kvtier::fstest::Gc(argv[2], std::strtoull(argv[3], nullptr, 10), argv[4]);
  }
  if (mode == "save" && argc == 4) return kvtier::fstest::Save(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (mode == "load" && argc == 4) return kvtier::fstest::Load(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (mode == "crash" && argc == 4) {
    return kvtier::fstest::Crash(argv[2], static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)));
  }
  if (mode == "race" && argc == 6) {
    return kvtier::fstest::Race(argv[2], static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)),
                                std::strtoull(argv[4], nullptr, 10), argv[5]);
  }
  std::fprintf(stderr,
               "usage: fs_pool_worker mix POOL WORKER OPS | gc POOL MAX_BYTES STOP_FILE | save POOL CHUNKS |"
               " load POOL CHUNKS | crash POOL SEED | race POOL SEED COUNT GO_FILE\n");
  return 2;
}
