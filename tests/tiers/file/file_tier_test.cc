// The file:// tier: URL options, restart, leftovers, capacity, corruption and concurrency, with both
// read engines.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/chunk_format.h"
#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "io/chunk_dir.h"
#include "io/dir_names.h"
#include "io/filesystem.h"

namespace kvtier::internal {
namespace {

using kvtier::testing::FlipByte;
using kvtier::testing::KeyNo;
using kvtier::testing::OnePiece;
using kvtier::testing::PayloadFor;
using kvtier::testing::TempDir;
using kvtier::testing::TestNamespace;

class FileTierTest : public ::testing::TestWithParam<bool> {  // param: io_uring
 protected:
  FileTierTest() : ns_(TestNamespace()), chunk_bytes_(ns_.layout().BytesPerChunk()) {}

  std::unique_ptr<Tier> Open(uint64_t capacity = 1 << 20) {
    FileTierOptions o;
    o.dir = dir_.path();
    o.capacity_bytes = capacity;
    o.reader.use_io_uring = GetParam();
    o.reader.fallback_threads = 2;
    auto t = OpenFileTier(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  ChunkId Id(uint32_t n) const { return ChunkId::Of(ns_, KeyNo(ns_, n)); }
  std::string PathOf(uint32_t n) const { return FileChunkPathForTesting(dir_.path(), Id(n)); }
  Status PutNo(Tier& t, uint32_t n) {
    auto payload = PayloadFor(KeyNo(ns_, n), chunk_bytes_);
    OnePiece p(payload);
    return t.Put(Id(n), p.src());
  }
  // Gets chunk n; on success checks every byte.
  Status GetNo(Tier& t, uint32_t n) {
    std::vector<std::byte> out(chunk_bytes_);
    OnePiece p(out);
    Status s = t.Get(Id(n), p.dst());
    if (s.ok()) {
      EXPECT_EQ(out, PayloadFor(KeyNo(ns_, n), chunk_bytes_)) << "chunk " << n;
    }
    return s;
  }
  uint64_t Stored() const { return StoredChunkBytes(chunk_bytes_); }

  TempDir dir_;
  Namespace ns_;
  uint64_t chunk_bytes_;
};

TEST_P(FileTierTest, PutGetAndTheLayoutOnDisk) {
  auto t = Open();
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->capabilities().persistent);
  EXPECT_TRUE(GetNo(*t, 1).IsNotFound());
  ASSERT_TRUE(PutNo(*t, 1).ok());
  ASSERT_TRUE(PutNo(*t, 1).ok());  // a second Put of one key is a no-op
  EXPECT_TRUE(t->Contains(Id(1)));
  EXPECT_TRUE(std::filesystem::exists(PathOf(1)));
  EXPECT_TRUE(GetNo(*t, 1).ok());
  const TierStats s = t->Stats();
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_EQ(s.usage_bytes, Stored());
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.get_latency.count, 2u);
  ASSERT_TRUE(t->Remove(Id(1)).ok());
  EXPECT_FALSE(std::filesystem::exists(PathOf(1)));
  EXPECT_EQ(t->Stats().usage_bytes, 0u);
}

TEST_P(FileTierTest, RestartKeepsChunksAndRemovesLeftovers) {
  {
    auto t = Open();
    for (uint32_t n = 0; n < 5; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  }
  // An interrupted write (written on this host by a pid that no longer exists), a live writer's
  // temporary (ours), an old one whose pid may have been reused, an old temporary of an earlier build,
  // a torn chunk file, and files that are not ours: one at the top, and one in a chunk folder whose
  // name merely contains ".tmp." (a user's file: never removed, however old).
  char writer[17];
  std::snprintf(writer, sizeof(writer), "%016llx", static_cast<unsigned long long>(LocalWriterId()));
  const std::string torn_tmp = PathOf(7) + ".kvtmp." + writer + ".2147483000.00000000000000aa.0";
  auto temp_beside = [](const std::string& path) {
    const std::filesystem::path p(path);
    return (p.parent_path() / MakeTempName(p.filename().string())).string();
  };
  const std::string live_tmp = temp_beside(PathOf(8));
  const std::string old_tmp = temp_beside(PathOf(9));
  const std::string legacy_tmp = PathOf(10) + ".tmp.2147483000.12345.0";
  const std::string user_tmp = std::filesystem::path(PathOf(11)).parent_path().string() + "/thesis.tmp.1.2.3";
  for (const std::string& p : {torn_tmp, live_tmp, old_tmp, legacy_tmp, user_tmp}) {
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << "half a chunk";
    ASSERT_TRUE(std::filesystem::exists(p));
  }
  ASSERT_TRUE(ParseTempName(std::filesystem::path(live_tmp).filename().string(),
                            [](std::string_view n) { return ParseChunkFileName(n).has_value(); }))
      << live_tmp;
  timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  for (const std::string& p : {old_tmp, legacy_tmp, user_tmp}) {
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), two_hours_ago, 0), 0);
  }
  ASSERT_EQ(::truncate(PathOf(4).c_str(), 5000), 0);
  const std::string foreign = dir_.path() + "/README";
  { std::ofstream(foreign) << "not a chunk"; }

  auto t = Open();
  const FileTierReport report = GetFileTierReport(*t);
  EXPECT_FALSE(report.read_only);
  EXPECT_EQ(report.temp_removed, 3u);
  EXPECT_EQ(report.corrupt_found, 1u);
  EXPECT_EQ(report.corrupt_removed, 1u);
  EXPECT_EQ(report.foreign_skipped, 2u);
  EXPECT_FALSE(std::filesystem::exists(torn_tmp));
  EXPECT_FALSE(std::filesystem::exists(old_tmp));
  EXPECT_FALSE(std::filesystem::exists(legacy_tmp));
  EXPECT_TRUE(std::filesystem::exists(live_tmp));
  EXPECT_TRUE(std::filesystem::exists(user_tmp));
  EXPECT_FALSE(std::filesystem::exists(PathOf(4)));
  EXPECT_TRUE(std::filesystem::exists(foreign));
  EXPECT_EQ(t->Stats().chunks, 4u);
  EXPECT_EQ(t->Stats().usage_bytes, 4 * Stored());
  for (uint32_t n = 0; n < 4; ++n) EXPECT_TRUE(GetNo(*t, n).ok()) << n;
  EXPECT_TRUE(GetNo(*t, 4).IsNotFound());
}

TEST_P(FileTierTest, UsageStaysUnderCapacityEvictingLeastRecentlyUsed) {
  auto t = Open(3 * Stored());
  for (uint32_t n = 0; n < 3; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  ASSERT_TRUE(GetNo(*t, 0).ok());  // 0 is now the most recently used; 1 the least
  ASSERT_TRUE(PutNo(*t, 3).ok());
  EXPECT_FALSE(t->Contains(Id(1)));
  EXPECT_FALSE(std::filesystem::exists(PathOf(1)));
  EXPECT_TRUE(t->Contains(Id(0)));
  const TierStats s = t->Stats();
  EXPECT_LE(s.usage_bytes, s.capacity_bytes);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.chunks, 3u);
}

TEST_P(FileTierTest, ChunkLargerThanCapacityIsNoSpace) {
  auto t = Open(Stored() - 1);
  EXPECT_TRUE(PutNo(*t, 1).IsNoSpace());
  EXPECT_FALSE(t->Contains(Id(1)));
  EXPECT_EQ(t->Stats().put_errors, 1u);
}

TEST_P(FileTierTest, RestartWithSmallerCapacityEvictsOldestByMtime) {
  {
    auto t = Open();
    for (uint32_t n = 0; n < 4; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  }
  // Ages set explicitly: 2 oldest, then 0, 3, 1.
  const int64_t base = 1700000000;
  const int64_t age[4] = {base + 20, base + 40, base + 10, base + 30};
  for (uint32_t n = 0; n < 4; ++n) {
    timespec ts[2] = {{age[n], 0}, {age[n], 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(n).c_str(), ts, 0), 0);
  }
  auto t = Open(2 * Stored());
  EXPECT_EQ(GetFileTierReport(*t).open_evictions, 2u);
  EXPECT_LE(t->Stats().usage_bytes, 2 * Stored());
  EXPECT_FALSE(t->Contains(Id(2)));
  EXPECT_FALSE(t->Contains(Id(0)));
  EXPECT_FALSE(std::filesystem::exists(PathOf(2)));
  EXPECT_TRUE(GetNo(*t, 1).ok());
  EXPECT_TRUE(GetNo(*t, 3).ok());
}

TEST_P(FileTierTest, HitRefreshesMtimeSoOrderSurvivesRestart) {
  {
    auto t = Open();
    ASSERT_TRUE(PutNo(*t, 0).ok());
    ASSERT_TRUE(PutNo(*t, 1).ok());
  }
  timespec old_ts[2] = {{1700000000, 0}, {1700000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(0).c_str(), old_ts, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(1).c_str(), old_ts, 0), 0);
  {
    auto t = Open();
    ASSERT_TRUE(GetNo(*t, 0).ok());  // 0 becomes recent on disk too
  }
  auto t = Open(Stored());
  EXPECT_TRUE(t->Contains(Id(0)));
  EXPECT_FALSE(t->Contains(Id(1)));
}

// Every corruption kind: Corruption, the file removed, the chunk counted and a miss afterwards.
TEST_P(FileTierTest, CorruptChunksAreRemovedCountedAndMissed) {
  auto t = Open();
  for (uint32_t n = 0; n < 4; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  FlipByte(PathOf(0), kChunkHeaderSize + 7);                    // flipped payload byte
  ASSERT_EQ(::truncate(PathOf(1).c_str(), kChunkHeaderSize), 0);  // truncated
  // Another namespace's chunk moved into chunk 2's place.
  const Namespace other = TestNamespace("tenant-b");
  {
    auto payload = PayloadFor(KeyNo(ns_, 2), chunk_bytes_);
    OnePiece p(payload);
    ChunkId foreign{other.id(), KeyNo(ns_, 2), other.layout().Fingerprint()};
    auto fs = OpenPosixFileSystem(dir_.path());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    ASSERT_TRUE(WriteChunkFileAtomic(**fs, ChunkRelPath(FileDirSpec(), Id(2)), foreign, p.src(), {}).ok());
  }
  for (uint32_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(GetNo(*t, n).IsCorruption()) << n;
    EXPECT_FALSE(t->Contains(Id(n))) << n;
    EXPECT_FALSE(std::filesystem::exists(PathOf(n))) << n;
    EXPECT_TRUE(GetNo(*t, n).IsNotFound()) << n;
  }
  // Chunk 3 read as another layout (same namespace and key).
  ChunkId wrong_layout = Id(3);
  wrong_layout.layout_fingerprint ^= 0xFF;
  std::vector<std::byte> out(chunk_bytes_);
  OnePiece p(out);
  EXPECT_TRUE(t->Get(wrong_layout, p.dst()).IsCorruption());
  EXPECT_FALSE(t->Contains(Id(3)));
  const TierStats s = t->Stats();
  EXPECT_EQ(s.corrupt, 4u);
  EXPECT_EQ(s.chunks, 0u);
  EXPECT_EQ(s.usage_bytes, 0u);
}

TEST_P(FileTierTest, CheckFindsCorruptionWithoutADestination) {
  auto t = Open();
  for (uint32_t n = 0; n < 3; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  FlipByte(PathOf(1), kChunkHeaderSize + chunk_bytes_ - 1);
  std::vector<ChunkInfo> all;
  ASSERT_TRUE(t->List([&](const ChunkInfo& i) { return all.push_back(i), true; }).ok());
  ASSERT_EQ(all.size(), 3u);
  int corrupt = 0;
  for (const ChunkInfo& info : all) {
    EXPECT_EQ(info.stored_bytes, Stored());
    const Status s = t->Check(info);
    corrupt += s.IsCorruption();
    EXPECT_TRUE(s.ok() || s.IsCorruption()) << s.ToString();
  }
  EXPECT_EQ(corrupt, 1);
  EXPECT_FALSE(t->Contains(Id(1)));
  EXPECT_EQ(t->Stats().corrupt, 1u);
}

TEST_P(FileTierTest, GetManyMixesHitsMissesAndCorruption) {
  auto t = Open();
  for (uint32_t n = 0; n < 6; ++n) ASSERT_TRUE(PutNo(*t, n).ok());
  FlipByte(PathOf(4), kChunkHeaderSize);
  std::vector<std::vector<std::byte>> outs(8, std::vector<std::byte>(chunk_bytes_));
  std::vector<std::span<std::byte>> pieces(outs.begin(), outs.end());
  std::vector<ReadOp> ops;
  for (uint32_t n = 0; n < 8; ++n) ops.push_back({Id(n), {&pieces[n], 1}, Status::OK()});
  t->GetMany(ops);
  for (uint32_t n = 0; n < 8; ++n) {
    if (n == 4) {
      EXPECT_TRUE(ops[n].status.IsCorruption());
    } else if (n >= 6) {
      EXPECT_TRUE(ops[n].status.IsNotFound());
    } else {
      ASSERT_TRUE(ops[n].status.ok()) << n << ops[n].status.ToString();
      EXPECT_EQ(outs[n], PayloadFor(KeyNo(ns_, n), chunk_bytes_));
    }
  }
}

TEST_P(FileTierTest, ConcurrentWritersAndReadersNeverSeeWrongBytes) {
  auto t = Open(8 * Stored());  // small: constant eviction while reading
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      for (uint32_t n = 0; n < 40; ++n) {
        const Status s = PutNo(*t, (n * 3 + static_cast<uint32_t>(w)) % 24);
        if (!s.ok() && !s.IsNoSpace()) ++wrong;
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::byte> out(chunk_bytes_);
      OnePiece p(out);
      for (uint32_t i = 0; i < 120; ++i) {
        const uint32_t n = (i * 7 + static_cast<uint32_t>(r)) % 24;
        const Status s = t->Get(Id(n), p.dst());
        if (s.ok()) {
          ++hits;
          if (out != PayloadFor(KeyNo(ns_, n), chunk_bytes_)) ++wrong;
        } else if (!s.IsNotFound()) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  const TierStats s = t->Stats();
  EXPECT_LE(s.usage_bytes, s.capacity_bytes);
  EXPECT_EQ(s.corrupt, 0u);
  // What the index holds is exactly what is on disk.
  auto again = Open(8 * Stored());
  EXPECT_EQ(again->Stats().chunks, s.chunks);
}

INSTANTIATE_TEST_SUITE_P(Readers, FileTierTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "IoUring" : "Preadv"; });

TEST(FileTierUrlTest, OptionsAreParsedAndUnknownOnesRejected) {
  auto u = TierUrl::Parse("file:///var/x?capacity=2GiB&sync=true&direct=false&inflight=64MiB");
  ASSERT_TRUE(u.ok());
  auto o = ParseFileTierUrl(*u);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->dir, "/var/x");
  EXPECT_EQ(o->capacity_bytes, 2ull << 30);
  EXPECT_TRUE(o->sync);
  EXPECT_FALSE(o->reader.direct_io);
  EXPECT_EQ(o->reader.max_inflight_bytes, 64ull << 20);
  auto d = ParseFileTierUrl(*TierUrl::Parse("file:///var/x"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->capacity_bytes, 0u);  // settled at open: recorded figure or the default
  for (const char* bad : {"file:///x?capacty=1GiB", "file://?capacity=1GiB", "file:///x?capacity=0",
                          "file:///x?sync=maybe", "file:///x?inflight=lots"}) {
    auto r = ParseFileTierUrl(*TierUrl::Parse(bad));
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
}

// A capacity binds only the process that gives it: it is never written to disk, so a later open
// without one gets the default (earlier builds recorded it in kvtier.capacity).
TEST(FileTierUrlTest, CapacityIsNeverRecorded) {
  TempDir dir;
  {
    auto t = OpenTier("file://" + dir.path() + "?capacity=3MiB");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->Stats().capacity_bytes, 3ull << 20);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/kvtier.capacity"));
  auto u = TierUrl::Parse("file://" + dir.path());
  auto t = OpenFileTier(*u);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().capacity_bytes, kDefaultFileCapacity);
}

// Looking changes nothing: a read-only open with a tiny capacity evicts nothing, a corrupt chunk is
// reported and left in place, and Put and Remove are refused.
TEST(FileTierReadOnlyTest, ReadOnlyOpenNeitherEvictsNorRemoves) {
  TempDir dir;
  const Namespace ns = TestNamespace();
  const uint64_t chunk_bytes = ns.layout().BytesPerChunk();
  auto id = [&](uint32_t n) { return ChunkId::Of(ns, KeyNo(ns, n)); };
  {
    auto t = OpenTier("file://" + dir.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (uint32_t n = 0; n < 4; ++n) {
      auto payload = PayloadFor(KeyNo(ns, n), chunk_bytes);
      OnePiece p(payload);
      ASSERT_TRUE((*t)->Put(id(n), p.src()).ok());
    }
  }
  ASSERT_TRUE(CorruptFileChunkForTesting(dir.path(), id(0)).ok());
  auto t = OpenTier("file://" + dir.path() + "?capacity=4KiB", TierOpenOptions{.read_only = true});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE((*t)->capabilities().read_only);
  const FileTierReport report = GetFileTierReport(**t);
  EXPECT_TRUE(report.read_only);
  EXPECT_EQ(report.open_evictions, 0u);
  EXPECT_EQ((*t)->Stats().chunks, 4u);
  for (uint32_t n = 0; n < 4; ++n) EXPECT_TRUE(std::filesystem::exists(FileChunkPathForTesting(dir.path(), id(n))));
  std::vector<std::byte> out(chunk_bytes);
  OnePiece p(out);
  EXPECT_TRUE((*t)->Get(id(0), p.dst()).IsCorruption());
  EXPECT_TRUE(std::filesystem::exists(FileChunkPathForTesting(dir.path(), id(0))));
  EXPECT_TRUE((*t)->Get(id(1), p.dst()).ok());
  EXPECT_EQ((*t)->Put(id(9), p.src()).code(), Code::kNotSupported);
  EXPECT_EQ((*t)->Remove(id(1)).code(), Code::kNotSupported);
  EXPECT_TRUE(std::filesystem::exists(FileChunkPathForTesting(dir.path(), id(1))));
  // A directory that does not exist is an error for a read-only open, and is not created.
  EXPECT_FALSE(OpenTier("file://" + dir.path() + "/absent", TierOpenOptions{.read_only = true}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/absent"));
}

// A new directory is marked; a non-empty one without the mark is refused and left as it was.
TEST(FileTierDirTest, UnmarkedDirectoryOfOtherFilesIsRefused) {
  TempDir dir;
  { std::ofstream(dir.path() + "/thesis.tmp.docx") << "a user's file"; }
  auto t = OpenTier("file://" + dir.path());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/thesis.tmp.docx"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + std::string(kFileDirMarker)));
}

TEST(FileTierUrlTest, OpenFromUrlCreatesTheDirectory) {
  TempDir dir;
  auto u = TierUrl::Parse("file://" + dir.path() + "/sub/dir?capacity=1MiB");
  ASSERT_TRUE(u.ok());
  auto t = OpenFileTier(*u);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/sub/dir"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir.path() + "/sub/dir/" + std::string(kFileDirMarker)));
  EXPECT_EQ((*t)->Stats().capacity_bytes, 1ull << 20);
  EXPECT_FALSE(GetFileTierReport(**t).io_engine.empty());
}

}  // namespace
}  // namespace kvtier::internal
