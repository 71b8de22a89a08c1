// shm:// beyond the conformance suite: many processes on one pool, SIGKILL at random points, dead lock
// holders, writers and readers, hostile files, restarts, borrowed views and the admin functions.
// Each test has its own directory under /dev/shm (dir=), removed with its pools at the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/xxh3.h"
#include "kvtier/store.h"
#include "reliability/test_util.h"
#include "tiers/fs/process_runner.h"
#include "tiers/shm/shm_admin.h"
#include "tiers/shm/shm_tier.h"
#include "tiers/shm/shm_worker_common.h"

namespace kvtier::shmtest {
namespace {

using fstest::Child;
using fstest::Spawn;
using fstest::Wait;
using testing::TestPayload;
using reltest::Scaled;
constexpr uint64_t kPieceBytesForTest = 1u << 20;  // shm:// seals and checks each 1 MiB piece on its own

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t FileHash(const std::string& path) {
  const std::string s = ReadAll(path);
  return XXH3_64bits(s.data(), s.size());
}

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/dev/shm/kvtier-shmtest-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      tmpl = (std::filesystem::temp_directory_path() / "kvtier-shmtest-XXXXXX").string();
      ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    }
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Url(const std::string& name, const std::string& capacity = "16MiB") const {
    return "shm://" + name + "?dir=" + dir_ + "&capacity=" + capacity;
  }
  std::string PoolPath(const std::string& name) const { return dir_ + "/kvtier-shm-" + name; }
  std::unique_ptr<Tier> Open(const std::string& url, bool read_only = false) {
    TierOpenOptions o;
    o.read_only = read_only;
    auto t = OpenTier(url, o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  Child Start(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {SHM_POOL_WORKER};
    argv.insert(argv.end(), args.begin(), args.end());
    return Spawn(argv, dir_ + "/out-" + std::to_string(counter_++) + ".txt");
  }
  // Waits until the child printed "ready"; false if it exited first or took a minute.
  bool WaitReady(const Child& c) {
    for (int i = 0; i < 60000; ++i) {
      if (ReadAll(c.output_path).find("ready") != std::string::npos) return true;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  static Status PutChunk(Tier& tier, uint32_t i) {
    const auto p = TestPayload(IdOf(i), SizeOf(i));
    const std::span<const std::byte> pieces[] = {p};
    return tier.Put(IdOf(i), pieces);
  }
  static Status GetChecked(Tier& tier, uint32_t i, bool* wrong) {
    std::vector<std::byte> out(SizeOf(i), std::byte{0xEE});
    const std::span<std::byte> pieces[] = {out};
    const Status s = tier.Get(IdOf(i), pieces);
    if (s.ok() && out != TestPayload(IdOf(i), out.size())) *wrong = true;
    return s;
  }
  // Every published chunk reads back exact, the pool's derived state matches its slots, and nothing
  // is left reserved or pinned: what a pool must look like once every process using it is gone.
  void ExpectRecovered(Tier& tier) {
    auto a = internal::AuditShmTier(tier, /*reclaim=*/true);  // takes the lock: none is left held
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE(a->consistent()) << "used " << a->used_pages << " bitmap " << a->bitmap_pages << " slots "
                                 << a->slot_pages << " indexed " << a->indexed << " published " << a->published_slots
                                 << " live " << a->live_chunks;
    EXPECT_EQ(a->reserved_slots, 0u);
    EXPECT_EQ(a->pinned_slots, 0u);
    EXPECT_EQ(a->dead_slots, 0u);
    EXPECT_EQ(a->used_pages, a->published_pages) << "capacity in use is exactly the live chunks' pages";
    EXPECT_EQ(tier.Stats().usage_bytes, a->published_pages * a->page_bytes);
    uint64_t wrong = 0, found = 0;
    for (uint32_t i = 0; i < kKeys + 8; ++i) {
      bool bad = false;
      const Status s = GetChecked(tier, i, &bad);
      EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
      wrong += bad;
      found += s.ok();
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(found, a->published_slots);
  }

  // A key file of 32 bytes from `seed`, mode 0600, in the test's directory.
  std::string KeyFile(uint32_t seed) const {
    std::string key(32, '\0');
    std::mt19937 rng(seed);
    for (char& c : key) c = static_cast<char>(rng());
    const std::string path = dir_ + "/key-" + std::to_string(seed);
    std::ofstream(path, std::ios::binary) << key;
    ::chmod(path.c_str(), 0600);
    return path;
  }

  std::string dir_;
  int counter_ = 0;
};

TEST_F(ShmTest, EightProcessesOverlappingKeysByteExactOrMiss) {
  const std::string url = Url("mix", "12MiB");
  auto tier = Open(url);  // created here; every worker maps the same file
  ASSERT_NE(tier, nullptr);
  const std::string ops = std::to_string(Scaled(200, 40));
  std::vector<Child> children;
  for (int w = 0; w < 8; ++w) children.push_back(Start({"mix", url, std::to_string(w + 1), ops}));
  uint64_t hits = 0;
  for (const Child& c : children) {
    const auto r = Wait(c);
    ASSERT_TRUE(r.exited) << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(fstest::Field(r.output, "wrong"), 0) << r.output;
    hits += static_cast<uint64_t>(std::max<long long>(0, fstest::Field(r.output, "hits")));
  }
  EXPECT_GT(hits, 0u) << "the workers must see each other's chunks";
  EXPECT_GT(tier->Stats().evictions, 0u) << "the keys are more than the pool holds";
  ExpectRecovered(*tier);
}

TEST_F(ShmTest, PopulateAndUnverifiedReadsStillExact) {
  auto writer = Open(Url("opts", "4MiB") + "&populate=1");
  ASSERT_NE(writer, nullptr);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(PutChunk(*writer, i).ok());
  auto plain = Open("shm://opts?dir=" + dir_ + "&verify=false");  // same pool, a second opener
  ASSERT_NE(plain, nullptr);
  bool wrong = false;
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(GetChecked(*plain, i, &wrong).ok()) << i;
  EXPECT_FALSE(wrong);
  ASSERT_TRUE(internal::CorruptShmChunkForTesting(*writer, IdOf(1)).ok());
  EXPECT_TRUE(GetChecked(*writer, 1, &wrong).IsCorruption()) << "the verifying opener still checks";
  EXPECT_FALSE(OpenTier("shm://opts?dir=" + dir_ + "&page=4096").ok()) << "another page size is refused";
}

TEST_F(ShmTest, KillCyclesLeaveNoWrongBytesNoLeakNoLock) {
  const std::string url = Url("kill", "8MiB");
  auto tier = Open(url);
  ASSERT_NE(tier, nullptr);
  std::mt19937 rng(20261201);
  const size_t cycles = Scaled(150, 15);  // two victims a cycle: 300 SIGKILLs
  const char* roles[] = {"writer", "reader", "evictor"};
  size_t killed = 0;
  for (size_t c = 0; c < cycles; ++c) {
    // Two victims at once (different roles) so kills land while others hold the lock or pins.
    Child a = Start({"crash", url, std::to_string(c * 2), roles[c % 3]});
    Child b = Start({"crash", url, std::to_string(c * 2 + 1), roles[(c + 1) % 3]});
    ASSERT_TRUE(WaitReady(a)) << ReadAll(a.output_path);
    ASSERT_TRUE(WaitReady(b)) << ReadAll(b.output_path);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 6000));
    ::kill(a.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    ::kill(b.pid, SIGKILL);
    for (const Child& ch : {a, b}) {
      const auto r = Wait(ch);
      EXPECT_FALSE(r.exited) << "a victim stopped by itself (3: it saw wrong bytes): " << r.exit_code << " " << r.output;
      killed += !r.exited;
    }
    if (c % 50 == 49) {  // now and then this process works on the pool between kills as well
      bool wrong = false;
      for (uint32_t i = 0; i < kKeys; i += 5) (void)GetChecked(*tier, i, &wrong);
      EXPECT_FALSE(wrong);
    }
  }
  EXPECT_EQ(killed, 2 * cycles);
  ExpectRecovered(*tier);
  std::printf("kill cycles: %zu, victims %zu, pool repairs %llu, reclaimed %llu, evictions %llu\n", cycles, killed,
              static_cast<unsigned long long>(internal::AuditShmTier(*tier, false)->repairs),
              static_cast<unsigned long long>(internal::AuditShmTier(*tier, false)->reclaimed),
              static_cast<unsigned long long>(tier->Stats().evictions));
}

TEST_F(ShmTest, DeadLockHolderIsRepaired) {
  const std::string url = Url("lock");
  auto tier = Open(url);
  ASSERT_NE(tier, nullptr);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(PutChunk(*tier, i).ok());
  Child c = Start({"holdlock", url});
  ASSERT_TRUE(WaitReady(c)) << ReadAll(c.output_path);
  ::kill(c.pid, SIGKILL);
  Wait(c);
  // The next locker gets EOWNERDEAD and rebuilds index, bitmap and counts from the slots.
  bool wrong = false;
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(GetChecked(*tier, i, &wrong).ok()) << i;
  EXPECT_FALSE(wrong);
  EXPECT_EQ(tier->Stats().chunks, 4u);
  auto a = internal::AuditShmTier(*tier, false);
  ASSERT_TRUE(a.ok());
  EXPECT_GE(a->repairs, 1u);
  ExpectRecovered(*tier);
}

TEST_F(ShmTest, DeadWriterAndReaderAreReclaimed) {
  const std::string url = Url("reclaim");
  auto tier = Open(url);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutChunk(*tier, 7).ok());
  Child w = Start({"reserve", url});
  Child r = Start({"pin", url, "7"});
  ASSERT_TRUE(WaitReady(w)) << ReadAll(w.output_path);
  ASSERT_TRUE(WaitReady(r)) << ReadAll(r.output_path);
  auto before = internal::AuditShmTier(*tier, false);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->reserved_slots, 1u);
  EXPECT_EQ(before->pinned_slots, 1u);
  ASSERT_TRUE(tier->Remove(IdOf(7)).ok());  // pinned by the reader: out of the index, pages kept
  EXPECT_EQ(internal::AuditShmTier(*tier, true)->dead_slots, 1u) << "a live reader's pin is respected";
  ::kill(w.pid, SIGKILL);
  ::kill(r.pid, SIGKILL);
  Wait(w);
  Wait(r);
  ExpectRecovered(*tier);  // the reservation and the pin of the dead are taken back
  EXPECT_EQ(tier->Stats().usage_bytes, 0u);
}

TEST_F(ShmTest, RestartKeepsChunksAcrossProcesses) {
  const std::string url = Url("restart");
  Child c = Start({"put", url, "0", "5"});
  const auto r = Wait(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto tier = Open(url);  // the writer is gone; its chunks are not
  ASSERT_NE(tier, nullptr);
  bool wrong = false;
  for (uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(GetChecked(*tier, i, &wrong).ok()) << i;
  EXPECT_FALSE(wrong);
  EXPECT_EQ(tier->Stats().chunks, 5u);
  tier.reset();
  auto ro = Open("shm://restart?dir=" + dir_, /*read_only=*/true);  // adopts the pool's own capacity
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(GetChecked(*ro, 3, &wrong).ok());
  EXPECT_FALSE(wrong);
  EXPECT_TRUE(ro->Put(IdOf(9), {}).code() == Code::kNotSupported);
}

TEST_F(ShmTest, HostileFilesAreRefusedAndNeverWritten) {
  auto refuse = [&](const std::string& name, const std::string& expect) {
    const std::string path = PoolPath(name);
    const uint64_t before = FileHash(path);
    auto t = OpenTier(Url(name));
    EXPECT_FALSE(t.ok()) << name;
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find(expect), std::string::npos) << t.status().ToString();
    }
    EXPECT_EQ(FileHash(path), before) << name << " was written";
  };
  {  // not made by kvtier
    std::ofstream(PoolPath("foreign")) << std::string(1 << 20, 'x');
    ::chmod(PoolPath("foreign").c_str(), 0600);
    refuse("foreign", "not a kvtier shm pool");
  }
  {  // made by kvtier, then damaged in various ways (copies of a real pool)
    auto t = Open(Url("good", "2MiB"));
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(PutChunk(*t, 1).ok());
    t.reset();
    const std::string good = ReadAll(PoolPath("good"));
    auto make = [&](const std::string& name, std::string bytes, mode_t mode) {
      std::ofstream(PoolPath(name), std::ios::binary) << bytes;
      ::chmod(PoolPath(name).c_str(), mode);
    };
    std::string v = good;
    v[8] = 99;  // format version
    make("version", v, 0600);
    refuse("version", "format version 99");
    make("truncated", good.substr(0, good.size() / 2), 0600);
    refuse("truncated", "truncated");
    make("wide", good, 0644);
    refuse("wide", "mode 0644");
    make("owned", good, 0600);
    if (::geteuid() == 0 && ::chown(PoolPath("owned").c_str(), 65534, 65534) == 0) {
      refuse("owned", "belongs to uid 65534");
    } else {
      std::printf("[owner case skipped: needs root to give a file to another uid]\n");
    }
    ASSERT_EQ(::symlink(PoolPath("good").c_str(), PoolPath("link").c_str()), 0);
    auto l = OpenTier(Url("link"));
    EXPECT_FALSE(l.ok());
    EXPECT_EQ(FileHash(PoolPath("good")), XXH3_64bits(good.data(), good.size()));
  }
  {  // truncated or replaced under an open pool: the pool refuses further use
    auto t = Open(Url("under", "2MiB"));
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(PutChunk(*t, 2).ok());
    const std::string path = PoolPath("under");
    const std::string saved = ReadAll(path);
    std::ofstream(dir_ + "/replacement") << "someone else's file";
    ASSERT_EQ(::rename((dir_ + "/replacement").c_str(), path.c_str()), 0);
    const uint64_t replacement = FileHash(path);
    Status s = PutChunk(*t, 3);
    EXPECT_TRUE(s.code() == Code::kIOError && s.message().find("replaced") != std::string::npos) << s.ToString();
    EXPECT_EQ(FileHash(path), replacement);
    t.reset();
    auto u = Open(Url("under2", "2MiB"));
    ASSERT_NE(u, nullptr);
    ASSERT_EQ(::truncate(PoolPath("under2").c_str(), 8192), 0);
    bool wrong = false;
    s = GetChecked(*u, 2, &wrong);
    EXPECT_TRUE(s.code() == Code::kIOError && s.message().find("truncated") != std::string::npos) << s.ToString();
    s = PutChunk(*u, 3);
    EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
  }
  EXPECT_FALSE(OpenTier("shm://../etc?dir=" + dir_ + "&capacity=1MiB").ok());
  EXPECT_FALSE(OpenTier("shm://x?dir=" + dir_ + "&capacity=1MiB&key_file=/k").ok());
  EXPECT_FALSE(OpenTier("shm://nosuch?dir=" + dir_).ok()) << "no capacity: nothing is created";
  EXPECT_FALSE(std::filesystem::exists(PoolPath("nosuch")));
}

TEST_F(ShmTest, PoolFileIsPrivateAndCreatedWhole) {
  auto t = Open(Url("mode"));
  ASSERT_NE(t, nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(PoolPath("mode").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".init."), std::string::npos) << "temporary left behind";
  }
  auto bigger = OpenTier(Url("mode", "64MiB"));
  EXPECT_FALSE(bigger.ok()) << "a pool does not grow under its users";
}

TEST_F(ShmTest, BorrowIsVerifiedAndPinnedAgainstEviction) {
  auto tier = Open(Url("borrow", "4MiB"));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutChunk(*tier, 5).ok());
  auto b = tier->Borrow(IdOf(5));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<std::byte> got;
  for (const auto& piece : b->pieces()) got.insert(got.end(), piece.begin(), piece.end());
  EXPECT_EQ(got, TestPayload(IdOf(5), SizeOf(5)));
  ASSERT_TRUE(tier->Remove(IdOf(5)).ok());
  for (uint32_t i = 10; i < 40; ++i) (void)PutChunk(*tier, i);  // fills and evicts: never the borrowed pages
  std::vector<std::byte> again;
  for (const auto& piece : b->pieces()) again.insert(again.end(), piece.begin(), piece.end());
  EXPECT_EQ(again, got);
  b->Release();
  ExpectRecovered(*tier);
  ASSERT_TRUE(PutChunk(*tier, 6).ok());
  ASSERT_TRUE(internal::CorruptShmChunkForTesting(*tier, IdOf(6)).ok());
  EXPECT_TRUE(tier->Borrow(IdOf(6)).status().IsCorruption());
  EXPECT_FALSE(tier->Contains(IdOf(6)));
}

TEST_F(ShmTest, ListLooksAndRemoveRemovesOnlyPools) {
  auto t = Open(Url("listed", "2MiB"));
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(PutChunk(*t, 1).ok());
  std::ofstream(PoolPath("junk")) << "not a pool";
  const uint64_t pool_hash = FileHash(PoolPath("listed"));
  auto list = internal::ListShmPools(dir_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].name, "listed");
  EXPECT_TRUE((*list)[1].status.ok());
  EXPECT_EQ((*list)[1].chunks, 1u);
  EXPECT_FALSE((*list)[0].status.ok());
  EXPECT_EQ(FileHash(PoolPath("listed")), pool_hash) << "listing changed the pool";
  EXPECT_FALSE(internal::RemoveShmPool(dir_, "junk").ok()) << "not a kvtier pool: left alone";
  EXPECT_TRUE(std::filesystem::exists(PoolPath("junk")));
  ASSERT_TRUE(internal::RemoveShmPool(dir_, "listed").ok());
  EXPECT_FALSE(std::filesystem::exists(PoolPath("listed")));
  EXPECT_EQ(PutChunk(*t, 2).code(), Code::kIOError) << "a removed pool takes no more chunks";
}

// `kvtier stats` per namespace: from the shared slots, seen alike by a writer and a read-only opener,
// adding up to the pool's usage once no writer holds a reservation.
TEST_F(ShmTest, UsagePerNamespaceFromTheSharedSlots) {
  auto tier = Open(Url("usage", "16MiB"));
  ASSERT_NE(tier, nullptr);
  const Namespace other = *Namespace::Make("shm-test/other", Layout{1, 1, 4, DType::kBF16, 1}, "tenant");
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(PutChunk(*tier, i).ok());
  const std::vector<std::byte> p(70000, std::byte{3});
  const std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE(tier->Put(testing::TestChunkId(other, 1), pieces).ok());
  auto ro = Open(Url("usage", "16MiB"), /*read_only=*/true);
  ASSERT_NE(ro, nullptr);
  for (Tier* t : {tier.get(), ro.get()}) {
    auto u = internal::ShmNamespaceUsage(*t);
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    ASSERT_EQ(u->size(), 2u);
    uint64_t bytes = 0;
    for (const auto& n : *u) {
      EXPECT_EQ(n.chunks, n.ns == TestNs().id() ? 3u : 1u);
      if (n.ns == other.id()) {
        EXPECT_EQ(n.bytes, 2u * 65536) << "70000 bytes and their table take two 64 KiB pages";
      }
      bytes += n.bytes;
    }
    EXPECT_EQ(bytes, tier->Stats().usage_bytes);
  }
  ASSERT_TRUE(tier->Remove(testing::TestChunkId(other, 1)).ok());
  auto after = internal::ShmNamespaceUsage(*ro);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].ns, TestNs().id());
  auto mem = OpenTier("mem://?capacity=1MiB");
  ASSERT_TRUE(mem.ok());
  EXPECT_FALSE(internal::ShmNamespaceUsage(**mem).ok()) << "not a shm:// tier";
}

// key_file=: the arena holds only ciphertext; the pool is bound to its key at creation (another key, no
// key, or a key for a plain pool is refused at open); readers authenticate every piece, so bytes changed
// with their checksums rewritten are still rejected (Corruption, destination zeroed, chunk removed).
TEST_F(ShmTest, EncryptedPoolHoldsNoPlaintextAndAuthenticates) {
  const std::string key_a = KeyFile(1), key_b = KeyFile(2);
  const std::string url = Url("sealed") + "&key_file=" + key_a;
  auto tier = Open(url);
  ASSERT_NE(tier, nullptr);
  const uint32_t big = 4;  // SizeOf(4) is over one 1 MiB piece: two sealed pieces
  ASSERT_GT(SizeOf(big), kPieceBytesForTest);
  for (uint32_t i : {1u, 2u, big}) ASSERT_TRUE(PutChunk(*tier, i).ok());
  const std::string file = ReadAll(PoolPath("sealed"));
  for (uint32_t i : {1u, big}) {
    const auto p = TestPayload(IdOf(i), SizeOf(i));
    const std::string run(reinterpret_cast<const char*>(p.data()) + 100, 64);
    EXPECT_EQ(file.find(run), std::string::npos) << "plaintext of chunk " << i << " found in the pool file";
  }
  bool wrong = false;
  for (uint32_t i : {1u, 2u, big}) EXPECT_TRUE(GetChecked(*tier, i, &wrong).ok());
  auto ro = Open(url, /*read_only=*/true);
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(GetChecked(*ro, big, &wrong).ok()) << "a read-only opener with the key reads it";
  EXPECT_FALSE(wrong);
  EXPECT_TRUE(tier->Check(ChunkInfo{IdOf(2), 0}).ok());

  auto keyless = OpenTier(Url("sealed"));
  ASSERT_FALSE(keyless.ok());
  EXPECT_NE(keyless.status().message().find("is encrypted; open it with its key_file="), std::string::npos)
      << keyless.status().ToString();
  auto other = OpenTier(Url("sealed") + "&key_file=" + key_b);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("another key"), std::string::npos) << other.status().ToString();
  auto plain = Open(Url("plain"));
  ASSERT_NE(plain, nullptr);
  auto keyed_plain = OpenTier(Url("plain") + "&key_file=" + key_a);
  ASSERT_FALSE(keyed_plain.ok());
  EXPECT_NE(keyed_plain.status().message().find("holds plain chunks"), std::string::npos);

  // Forged: a ciphertext byte changed and the piece and table checksums rewritten to match.
  for (uint32_t i : {1u, big}) {
    ASSERT_TRUE(internal::CorruptShmChunkForTesting(*tier, IdOf(i), /*forge_sums=*/true).ok());
    std::vector<std::byte> out(SizeOf(i), std::byte{0xEE});
    const std::span<std::byte> pieces[] = {out};
    const Status s = tier->Get(IdOf(i), pieces);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0}; }))
        << "a rejected read left bytes in the destination";
    EXPECT_FALSE(tier->Contains(IdOf(i))) << "removed";
  }
  ASSERT_TRUE(PutChunk(*tier, 3).ok());
  ASSERT_TRUE(internal::CorruptShmChunkForTesting(*tier, IdOf(3), /*forge_sums=*/true).ok());
  EXPECT_TRUE(tier->Check(ChunkInfo{IdOf(3), 0}).IsCorruption()) << "Check authenticates";
  ExpectRecovered(*tier);
}

// StoreOptions::key_file reaches shm:// as every tier but mem:// (it was refused before shm:// encrypted):
// the Store opens and its pool is made encrypted, so a keyless opener is refused.
TEST_F(ShmTest, StoreKeyFileMakesAnEncryptedPool) {
  StoreOptions opt;
  opt.tiers = {Url("storekey")};
  opt.key_file = KeyFile(5);
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto keyless = OpenTier(Url("storekey"));
  ASSERT_FALSE(keyless.ok());
  EXPECT_NE(keyless.status().message().find("is encrypted"), std::string::npos) << keyless.status().ToString();
}

// Borrow from an encrypted pool: the arena holds ciphertext, so the chunk is lent as a private opened
// copy: the plaintext, no pin on the pool, unchanged by a Remove and by eviction.
TEST_F(ShmTest, BorrowFromEncryptedPoolIsAnOpenedCopy) {
  auto tier = Open(Url("sealedborrow", "4MiB") + "&key_file=" + KeyFile(3));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutChunk(*tier, 5).ok());
  auto b = tier->Borrow(IdOf(5));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto collect = [&] {
    std::vector<std::byte> got;
    for (const auto& piece : b->pieces()) got.insert(got.end(), piece.begin(), piece.end());
    return got;
  };
  EXPECT_EQ(collect(), TestPayload(IdOf(5), SizeOf(5)));
  auto a = internal::AuditShmTier(*tier, false);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->pinned_slots, 0u) << "an opened copy holds no pin";
  ASSERT_TRUE(tier->Remove(IdOf(5)).ok());
  for (uint32_t i = 10; i < 40; ++i) (void)PutChunk(*tier, i);
  EXPECT_EQ(collect(), TestPayload(IdOf(5), SizeOf(5)));
  b->Release();
  EXPECT_TRUE(tier->Borrow(IdOf(5)).status().IsNotFound());
  ExpectRecovered(*tier);
}

// group=: the file is made 0660 and given that group (checked on the file), by gid or by name; a later
// open must name the same group; without group= the 0660 file is refused as too wide.
TEST_F(ShmTest, GroupSharesTheFileWithThatGroupOnly) {
  const gid_t gid = ::getgid();  // a group this user belongs to
  auto t = Open(Url("grp") + "&group=" + std::to_string(gid));
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(PutChunk(*t, 1).ok());
  struct stat st {};
  ASSERT_EQ(::stat(PoolPath("grp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, gid);
  const struct group* named = ::getgrgid(gid);
  ASSERT_NE(named, nullptr);
  auto by_name = Open(Url("grp") + "&group=" + named->gr_name);
  ASSERT_NE(by_name, nullptr);
  bool wrong = false;
  EXPECT_TRUE(GetChecked(*by_name, 1, &wrong).ok());
  EXPECT_FALSE(wrong);
  auto without = OpenTier(Url("grp"));
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.status().message().find("mode 0660, wider than 0600"), std::string::npos) << without.status().ToString();
  auto other = OpenTier(Url("grp") + "&group=" + std::to_string(gid + 1));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("is shared with group " + std::to_string(gid)), std::string::npos)
      << other.status().ToString();
  EXPECT_FALSE(OpenTier(Url("grp2") + "&group=kvtier-no-such-group").ok());
  EXPECT_FALSE(std::filesystem::exists(PoolPath("grp2")));
}

// A hugetlbfs mount with free huge pages, from /proc/mounts and /sys/kernel/mm/hugepages; empty with
// the reason in `why` when there is none (the test never mounts or reserves anything).
std::string HugetlbfsMount(std::string* why) {
  std::ifstream mounts("/proc/mounts");
  std::string dev, dir, type, rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if (type != "hugetlbfs") continue;
    struct statfs fs {};
    if (::statfs(dir.c_str(), &fs) != 0) continue;
    const std::string free_path = "/sys/kernel/mm/hugepages/hugepages-" + std::to_string(fs.f_bsize / 1024) + "kB/free_hugepages";
    uint64_t free_pages = 0;
    std::ifstream(free_path) >> free_pages;
    if (free_pages >= 2) return dir;
    *why = dir + " has " + std::to_string(free_pages) + " free huge pages of " + std::to_string(fs.f_bsize) + " bytes (needs 2)";
  }
  if (why->empty()) *why = "no hugetlbfs mount in /proc/mounts";
  return "";
}

TEST_F(ShmTest, HugepagesNeedsAHugetlbfsMount) {
  auto refused = OpenTier("shm://huge?hugepages=" + dir_ + "&capacity=4MiB");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is not a hugetlbfs mount"), std::string::npos) << refused.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(PoolPath("huge")));
  std::string why;
  const std::string mount = HugetlbfsMount(&why);
  if (mount.empty()) {
    std::printf("[hugepages= pool skipped: %s]\n", why.c_str());
    GTEST_SKIP() << why;
  }
  struct statfs fs {};
  ASSERT_EQ(::statfs(mount.c_str(), &fs), 0);
  const std::string name = "test-" + std::to_string(::getpid()) + "-huge";
  {
    auto t = OpenTier("shm://" + name + "?hugepages=" + mount + "&capacity=" + std::to_string(fs.f_bsize));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(PutChunk(**t, 1).ok());
    bool wrong = false;
    EXPECT_TRUE(GetChecked(**t, 1, &wrong).ok());
    EXPECT_FALSE(wrong);
    struct stat st {};
    ASSERT_EQ(::stat((mount + "/kvtier-shm-" + name).c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size) % fs.f_bsize, 0u) << "the file is a whole number of huge pages";
  }
  EXPECT_TRUE(internal::RemoveShmPool(mount, name).ok());
}

// Which host memory a GPU process is offered to page-lock once: a writable opener's whole mapping of a
// plain pool (every read's source and Borrow's views lie in it); nothing for a read-only opener, an
// encrypted pool or another tier.
TEST_F(ShmTest, HostRegionsOfferedForPinning) {
  auto tier = Open(Url("pinme"));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutChunk(*tier, 1).ok());
  const auto regions = tier->HostRegions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].size(), std::filesystem::file_size(PoolPath("pinme")));
  auto b = tier->Borrow(IdOf(1));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (const auto& piece : b->pieces()) {
    EXPECT_GE(piece.data(), regions[0].data());
    EXPECT_LE(piece.data() + piece.size(), regions[0].data() + regions[0].size()) << "a borrowed view lies in it";
  }
  b->Release();
  auto ro = Open(Url("pinme"), /*read_only=*/true);
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(ro->HostRegions().empty()) << "a PROT_READ mapping is not offered";
  auto sealed = Open(Url("pinsealed") + "&key_file=" + KeyFile(4));
  ASSERT_NE(sealed, nullptr);
  EXPECT_TRUE(sealed->HostRegions().empty()) << "an encrypted arena holds only ciphertext";
  auto mem = OpenTier("mem://?capacity=1MiB");
  ASSERT_TRUE(mem.ok());
  EXPECT_TRUE((*mem)->HostRegions().empty());
}

TEST(ShmDefaultDir, PoolUnderDevShmIsRemovedByTheTest) {
  const std::string name = "test-" + std::to_string(::getpid()) + "-default";
  {
    auto t = OpenTier("shm://" + name + "?capacity=1MiB&page=4096");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const std::vector<std::byte> p(5000, std::byte{7});
    const std::span<const std::byte> pieces[] = {p};
    EXPECT_TRUE((*t)->Put(IdOf(1), pieces).ok());
  }
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/kvtier-shm-" + name));
  EXPECT_TRUE(internal::RemoveShmPool("/dev/shm", name).ok());
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/kvtier-shm-" + name));
}

}  // namespace
}  // namespace kvtier::shmtest
