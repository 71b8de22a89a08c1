// shm_pool_worker: one process of the multi-process shm:// tests, started (posix_spawn) by shm_test.
//
//   shm_pool_worker mix URL SEED OPS     saves, loads and removes shared keys; checks every load
//   shm_pool_worker crash URL SEED ROLE  prints "ready", then works as ROLE (writer, reader, evictor)
//                                        until it is killed; a reader exits 3 at the first wrong byte
//   shm_pool_worker put URL FIRST COUNT  saves chunks FIRST .. FIRST+COUNT-1 and exits
//   shm_pool_worker holdlock URL         takes the pool lock, reserves a slot, damages the derived
//                                        state (index entry, usage count) as a writer dying mid-change
//                                        would, prints "ready" and waits to be killed
//   shm_pool_worker reserve URL          reserves pages (lock released), prints "ready", waits
//   shm_pool_worker pin URL I            borrows chunk I (a reader pin), prints "ready", waits
//
// Prints one "key=value ..." summary line. Exit status: 0 clean, 3 a wrong chunk was seen, 2 bad usage
// or setup failure. Payloads derive from the key, so any process can check any load.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kvtier/keys.h"
#include "kvtier/tier.h"
#include "support/chunk_payload.h"
#include "tiers/shm/shm_pool.h"
#include "tiers/shm/shm_worker_common.h"

namespace kvtier::shmtest {
namespace {

using testing::TestChunkId;
using testing::TestPayload;

Status PutChunk(Tier& tier, uint32_t i) {
  const ChunkId id = IdOf(i);
  const auto p = TestPayload(id, SizeOf(i));
  const std::span<const std::byte> pieces[] = {p};
  return tier.Put(id, pieces);
}

// 1: hit and exact, 0: miss, -1: wrong bytes or an unexpected error.
int GetChunk(Tier& tier, uint32_t i) {
  const ChunkId id = IdOf(i);
  std::vector<std::byte> out(SizeOf(i), std::byte{0xEE});
  const std::span<std::byte> pieces[] = {out};
  const Status s = tier.Get(id, pieces);
  if (s.IsNotFound()) return 0;
  if (!s.ok()) {
    std::printf("error %s\n", s.ToString().c_str());
    return -1;
  }
  return out == TestPayload(id, out.size()) ? 1 : -1;
}

[[noreturn]] void WaitForKill() {
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int Mix(const std::string& url, uint64_t seed, uint64_t ops) {
  auto tier = OpenTier(url);
  if (!tier.ok()) {
    std::printf("open failed: %s\n", tier.status().ToString().c_str());
    return 2;
  }
  uint64_t x = seed * 2654435761u + 1, puts = 0, hits = 0, misses = 0, wrong = 0;
  for (uint64_t op = 0; op < ops; ++op) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint32_t i = static_cast<uint32_t>((x >> 8) % kKeys);
    const uint64_t what = (x >> 40) % 10;
    if (what < 4) {
      const Status s = PutChunk(**tier, i);
      if (s.ok()) ++puts;
    } else if (what < 9) {
      const int r = GetChunk(**tier, i);
      (r > 0 ? hits : r == 0 ? misses : wrong)++;
    } else {
      (void)(*tier)->Remove(IdOf(i));
    }
  }
  std::printf("done puts=%llu hits=%llu misses=%llu wrong=%llu\n", static_cast<unsigned long long>(puts),
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
              static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 3;
}

int Crash(const std::string& url, uint64_t seed, const std::string& role) {
  auto tier = OpenTier(url);
  if (!tier.ok()) {
    std::printf("open failed: %s\n", tier.status().ToString().c_str());
    return 2;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  uint64_t x = seed * 2654435761u + 7;
  for (;;) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint32_t i = static_cast<uint32_t>((x >> 8) % kKeys);
    if (role == "writer") {
      (void)PutChunk(**tier, i);
    } else if (role == "reader") {
      if (GetChunk(**tier, i) < 0) {
        std::printf("wrong bytes for chunk %u\n", i);
        return 3;
      }
      if (auto b = (*tier)->Borrow(IdOf(i)); b.ok()) {  // a pin held across the kill, sometimes
        std::vector<std::byte> got;
        for (const auto& piece : b->pieces()) got.insert(got.end(), piece.begin(), piece.end());
        if (got != TestPayload(IdOf(i), SizeOf(i))) {
          std::printf("wrong borrowed bytes for chunk %u\n", i);
          return 3;
        }
      }
    } else {  // evictor: removes, and saves large chunks that push others out
      (void)(*tier)->Remove(IdOf(i));
      (void)PutChunk(**tier, kKeys + static_cast<uint32_t>(x % 8));
    }
  }
}

int Put(const std::string& url, uint32_t first, uint32_t count) {
  auto tier = OpenTier(url);
  if (!tier.ok()) return 2;
  for (uint32_t i = first; i < first + count; ++i) {
    if (Status s = PutChunk(**tier, i); !s.ok()) {
      std::printf("put %u: %s\n", i, s.ToString().c_str());
      return 2;
    }
  }
  std::printf("done puts=%u\n", count);
  return 0;
}

Result<std::unique_ptr<internal::shm::ShmPool>> OpenPool(const std::string& url_text) {
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(url_text));
  internal::shm::PoolSpec spec;
  spec.name = url.path;
  spec.dir = url.params.count("dir") ? url.params["dir"] : "/dev/shm";
  return internal::shm::ShmPool::Open(spec);
}

int HoldLock(const std::string& url) {
  auto pool = OpenPool(url);
  if (!pool.ok() || !(*pool)->Lock().ok()) return 2;
  auto& p = **pool;
  (void)p.ReserveLocked(3);
  // Damage what a repair rebuilds, as a holder killed in the middle of an update leaves it.
  p.header().used_pages.fetch_add(1000);
  p.header().live_chunks.fetch_add(5);
  auto* index = reinterpret_cast<std::atomic<uint32_t>*>(reinterpret_cast<std::byte*>(&p.header()) + p.header().index_off);
  for (uint64_t i = 0; i < p.header().index_size; ++i) index[i].store(internal::shm::kNone);
  WaitForKill();
}

int Reserve(const std::string& url) {
  auto pool = OpenPool(url);
  if (!pool.ok() || !(*pool)->Lock().ok()) return 2;
  const bool ok = (*pool)->ReserveLocked(4).ok();
  (*pool)->Unlock();
  if (!ok) return 2;
  WaitForKill();
}

int Pin(const std::string& url, uint32_t i) {
  auto tier = OpenTier(url);
  if (!tier.ok()) return 2;
  auto b = (*tier)->Borrow(IdOf(i));
  if (!b.ok()) {
    std::printf("borrow: %s\n", b.status().ToString().c_str());
    return 2;
  }
  WaitForKill();
}

}  // namespace
}  // namespace kvtier::shmtest

int main(int argc, char** argv) {
  using namespace kvtier::shmtest;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mix" && argc == 5) return Mix(argv[2], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  if (mode == "crash" && argc == 5) return Crash(argv[2], std::strtoull(argv[3], nullptr, 10), argv[4]);
  if (mode == "put" && argc == 5) {
    return Put(argv[2], static_cast<uint32_t>(std::atoi(argv[3])), static_cast<uint32_t>(std::atoi(argv[4])));
  }
  if (mode == "holdlock" && argc == 3) return HoldLock(argv[2]);
  if (mode == "reserve" && argc == 3) return Reserve(argv[2]);
  if (mode == "pin" && argc == 4) return Pin(argv[2], static_cast<uint32_t>(std::atoi(argv[3])));
  std::fprintf(stderr, "usage: shm_pool_worker mix|crash|put|holdlock|reserve|pin ...\n");
  return 2;
}
