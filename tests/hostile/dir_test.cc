// Invariants of file:// and fs:// in hostile directories, each case on both tiers over real folders:
// links are never followed, only regular files are opened (and open never blocks), only kvtier's own
// names are removed, unmarked folders of other files are refused, read-only opens change nothing, a
// chunk-named file of the wrong size or type is corrupt and never evicts good chunks, and the tiers'
// small files are range-checked.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "tiers/fs/pool_gc.h"
#include "tiers/fs/pool_layout.h"
#include "hostile/hostile_util.h"
#include "io/dir_names.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

class HostileDirTest : public ::testing::TestWithParam<Kind> {
 protected:
  HostileDirTest() : ns_(TestNamespace()) {
    root_ = base_.path() + "/tier";
    outside_ = base_.path() + "/outside";
    fs::create_directories(outside_);
    WriteFile(outside_ + "/precious.txt", "a user's file outside the tier");
  }
  Kind kind() const { return GetParam(); }
  std::unique_ptr<Tier> Open(const OpenSpec& s = {}) {
    auto t = OpenKind(kind(), root_, s);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // A populated tier with chunks 0..n-1, closed again.
  void Populate(uint32_t n) {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    for (uint32_t i = 0; i < n; ++i) ASSERT_TRUE(PutNo(*t, ns_, i).ok());
  }
  std::string Chunk(uint32_t n) const { return ChunkFile(kind(), root_, IdNo(ns_, n)); }
  // Runs every operation that walks or cleans the directory: open (writable), List, Check of each,
  // and for fs:// a gc pass.
  void WalkAndClean() {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    std::vector<ChunkInfo> all;
    ASSERT_TRUE(t->List([&](const ChunkInfo& i) {
                   all.push_back(i);
                   return true;
                 }).ok());
    for (const ChunkInfo& i : all) (void)t->Check(i);
    if (kind() == Kind::kFs) {
      auto r = internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = 0, .grace = std::chrono::seconds(0)});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  TempDir base_;
  std::string root_, outside_;
  Namespace ns_;
};

TEST_P(HostileDirTest, RefusesANonEmptyUnmarkedDirectory) {
  fs::create_directories(root_);
  WriteFile(root_ + "/thesis.tmp.docx", "chapter one");
  const auto before = TreePrint(base_.path());
  auto t = OpenKind(kind(), root_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find("not kvtier's"), std::string::npos) << t.status().message();
  EXPECT_EQ(TreePrint(base_.path()), before);
}

TEST_P(HostileDirTest, ForeignFilesInsideATierAreNeverTouched) {
  Populate(3);
  // A user's files wherever kvtier looks: beside the marker, in namespace and fan-out folders.
  const std::string ns_dir = fs::path(Chunk(0)).parent_path().string();
  const std::vector<std::string> foreign = {
      root_ + "/thesis.tmp.docx", ns_dir + "/notes.tmp.1.2.3", ns_dir + "/" + fs::path(Chunk(0)).filename().string() + ".bak",
      ns_dir + "/x.kvc.kvtmp.zz.1.2.3", ns_dir + "/thesis.kvc.tmp.1.2.3",
      ns_dir + "/ABCDEF" + std::string(58, '0') + ".kvc"};
  for (const auto& f : foreign) WriteFile(f, "mine");
  WalkAndClean();
  for (const auto& f : foreign) EXPECT_TRUE(Exists(f)) << f;
}

TEST_P(HostileDirTest, StaleTemporariesOfDeadLocalWritersAreRemovedLiveOnesKept) {
  Populate(1);
  const std::string dir = fs::path(Chunk(0)).parent_path().string();
  const std::string final_name = fs::path(Chunk(0)).filename().string();
  // A writer of this host that is gone: pid 2^22+7 is above pid_max's default and never runs.
  std::string dead = internal::MakeTempName(final_name);
  const size_t pid_at = dead.find('.', dead.find(".kvtmp.") + 7) + 1;
  dead.replace(pid_at, dead.find('.', pid_at) - pid_at, "4194311");
  const std::string live = internal::MakeTempName(final_name);  // ours: alive
  WriteFile(dir + "/" + dead, "torn");
  WriteFile(dir + "/" + live, "in progress");
  {
    auto t = Open();  // file:// cleans at a writable open; fs:// at gc
    ASSERT_NE(t, nullptr);
  }
  if (kind() == Kind::kFs) {
    ASSERT_TRUE(internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = UINT64_MAX,
                                                                        .grace = std::chrono::hours(1)})
                    .ok());
  }
  EXPECT_FALSE(Exists(dir + "/" + dead));
  EXPECT_TRUE(Exists(dir + "/" + live));
}

TEST_P(HostileDirTest, ASymlinkedChunkIsNeverFollowed) {
  Populate(2);
  // Chunk 0 is replaced by a link to a user's file; chunk 1 by a link to a copy of a valid chunk.
  fs::copy_file(Chunk(1), outside_ + "/copy.kvc");
  fs::remove(Chunk(0));
  fs::create_symlink(outside_ + "/precious.txt", Chunk(0));
  fs::remove(Chunk(1));
  fs::create_symlink(outside_ + "/copy.kvc", Chunk(1));
  const auto outside_before = TreePrint(outside_);
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    EXPECT_FALSE(GetNo(*t, ns_, 0).ok());
    EXPECT_FALSE(GetNo(*t, ns_, 1).ok()) << "a link must not be read even when its target is valid";
    EXPECT_FALSE(t->Contains(IdNo(ns_, 1)));
  }
  WalkAndClean();
  EXPECT_EQ(TreePrint(outside_), outside_before);
  EXPECT_TRUE(fs::is_symlink(Chunk(0)));  // reported and skipped, not removed
}

TEST_P(HostileDirTest, ASymlinkedFolderIsNeverWalkedOrWrittenThrough) {
  Populate(1);
  // Move chunk 0's fan-out folder outside and leave a link in its place: gc, verify and Put must not
  // reach through it.
  const fs::path fan = fs::path(Chunk(0)).parent_path();
  const std::string moved = outside_ + "/fan";
  fs::rename(fan, moved);
  fs::create_directory_symlink(moved, fan);
  const auto outside_before = TreePrint(outside_);
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    EXPECT_FALSE(GetNo(*t, ns_, 0).ok());
    // A Put whose path crosses the link fails (and writes nothing outside).
    (void)t->Remove(IdNo(ns_, 0));
    EXPECT_FALSE(PutNo(*t, ns_, 0).ok());
  }
  WalkAndClean();
  EXPECT_EQ(TreePrint(outside_), outside_before);
}

TEST_P(HostileDirTest, FifosNeverHangAndAreNotOpened) {
  Populate(2);
  // A FIFO in place of chunk 0: a load is a quick miss (corrupt), never a hang.
  fs::remove(Chunk(0));
  ASSERT_EQ(::mkfifo(Chunk(0).c_str(), 0644), 0);
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    EXPECT_FALSE(GetNo(*t, ns_, 0).ok());
    EXPECT_TRUE(GetNo(*t, ns_, 1).ok());
  }
  WalkAndClean();
  // The tier's small files as FIFOs: open reports an error (or ignores an optional file), never hangs.
  const std::string marker = root_ + (kind() == Kind::kFile ? "/KVTIER_DIR" : "/KVTIER_POOL");
  if (kind() == Kind::kFs) {
    fs::remove(root_ + "/USAGE");
    ASSERT_EQ(::mkfifo((root_ + "/USAGE").c_str(), 0644), 0);
    EXPECT_TRUE(OpenKind(kind(), root_).ok());  // usage is an estimate: a bad one is ignored
    fs::remove(root_ + "/GC.lock");
    ASSERT_EQ(::mkfifo((root_ + "/GC.lock").c_str(), 0644), 0);
    EXPECT_FALSE(internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = 0}).ok());
  }
  fs::remove(marker);
  ASSERT_EQ(::mkfifo(marker.c_str(), 0644), 0);
  auto t = OpenKind(kind(), root_);
  EXPECT_FALSE(t.ok());
  EXPECT_FALSE(OpenKind(kind(), root_, OpenSpec{.read_only = true}).ok());
}

TEST_P(HostileDirTest, ASparseGiantWithAChunkNameNeverEvictsGoodChunks) {
  Populate(4);
  uint64_t good_bytes = 0;
  for (uint32_t i = 0; i < 4; ++i) good_bytes += fs::file_size(Chunk(i));
  // A 100 GiB sparse file named like chunk 9.
  const std::string giant = ChunkFile(kind(), root_, IdNo(ns_, 9));
  fs::create_directories(fs::path(giant).parent_path());
  {
    const int fd = ::open(giant.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 100ll << 30), 0);
    ::close(fd);
  }
  if (kind() == Kind::kFs) {
    auto r = internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = good_bytes});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->chunks_evicted, 0u);
    EXPECT_EQ(r->corrupt_removed, 1u);
  }
  auto t = Open(OpenSpec{.capacity = good_bytes + (1 << 20)});
  ASSERT_NE(t, nullptr);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(GetNo(*t, ns_, i).ok()) << "chunk " << i;
  EXPECT_FALSE(GetNo(*t, ns_, 9).ok());
  EXPECT_LE(t->Stats().usage_bytes, good_bytes + (1 << 20));
  EXPECT_FALSE(Exists(giant)) << "a corrupt chunk-named file is removed by a writer";
}

TEST_P(HostileDirTest, HostileMarkerAndUsageFilesAreRangeChecked) {
  Populate(1);
  const std::string marker = root_ + (kind() == Kind::kFile ? "/KVTIER_DIR" : "/KVTIER_POOL");
  const std::string magic = kind() == Kind::kFile ? "kvtier-file" : "kvtier-pool";
  for (const std::string& text : {magic + "\nversion=99999999999999999999999\n", magic + "\nversion=-1\n",
                                  magic + "\nversion=\n", std::string("garbage\n"), std::string(70000, 'x')}) {
    WriteFile(marker, text);
    auto t = OpenKind(kind(), root_);
    EXPECT_FALSE(t.ok()) << text.substr(0, 40);
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), Code::kCorruption) << t.status().ToString();
    }
  }
  WriteFile(marker, magic + "\nversion=2\n");
  auto newer = OpenKind(kind(), root_);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), Code::kVersionMismatch);
  WriteFile(marker, magic + "\nversion=1\n");
  if (kind() == Kind::kFs) {
    for (const std::string& text : {std::string("bytes=99999999999999999999999\nchunks=1\nscanned_at=1\n"),
                                    std::string("bytes=18446744073709551615\nchunks=1\nscanned_at=1\n"),
                                    std::string("bytes=-5\nchunks=1\nscanned_at=1\n")}) {
      EXPECT_FALSE(internal::ParsePoolUsage(text).ok()) << text;
      WriteFile(root_ + "/USAGE", text);
      auto t = OpenKind(kind(), root_);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_LT((*t)->Stats().usage_bytes, 1ull << 40);
    }
  } else {
    WriteFile(root_ + "/kvtier.capacity", "1\n");  // an earlier build's record: no longer obeyed
    auto t = OpenKind(kind(), root_);
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(GetNo(**t, ns_, 0).ok());
  }
}

TEST_P(HostileDirTest, HugeGraceNeverOverflowsIntoRemovingLiveTemporaries) {
  const int64_t now = 2'000'000'000ll * 1'000'000'000ll;
  internal::TempName t{"x.kvc", std::nullopt, 1};
  EXPECT_FALSE(internal::IsStaleTemp(t, now - 1'000'000'000, now, std::chrono::seconds::max()));
  EXPECT_FALSE(internal::IsStaleTemp(t, now - 1'000'000'000, now, std::chrono::seconds(999999999ll * 86400)));
  EXPECT_TRUE(internal::IsStaleTemp(t, now - 7200ll * 1'000'000'000, now, std::chrono::seconds(3600)));
  EXPECT_FALSE(internal::IsStaleTemp(t, now + 5'000'000'000, now, std::chrono::seconds(0)));  // future mtime
  if (kind() == Kind::kFs) {
    Populate(1);
    const std::string dir = fs::path(Chunk(0)).parent_path().string();
    const std::string live = dir + "/" + internal::MakeTempName(fs::path(Chunk(0)).filename().string());
    WriteFile(live, "being written");
    auto r = internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = UINT64_MAX,
                                                                      .grace = std::chrono::seconds::max()});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->temps_removed, 0u);
    EXPECT_TRUE(Exists(live));
  }
}

TEST_P(HostileDirTest, ReadOnlyOpenChangesNothingEvenWithATinyCapacity) {
  Populate(3);
  const std::string dir = fs::path(Chunk(0)).parent_path().string();
  std::string dead = internal::MakeTempName(fs::path(Chunk(0)).filename().string());
  WriteFile(dir + "/" + dead, "leftover");
  ASSERT_TRUE((kind() == Kind::kFile ? internal::CorruptFileChunkForTesting(root_, IdNo(ns_, 2))
                                     : internal::CorruptPoolChunkForTesting(root_, IdNo(ns_, 2)))
                  .ok());
  const auto before = TreePrint(base_.path());
  {
    auto t = OpenKind(kind(), root_, OpenSpec{.read_only = true, .capacity = 1});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE((*t)->capabilities().read_only);
    EXPECT_TRUE(GetNo(**t, ns_, 0).ok());
    EXPECT_FALSE(GetNo(**t, ns_, 2).ok());
    std::vector<ChunkInfo> all;
    ASSERT_TRUE((*t)->List([&](const ChunkInfo& i) {
                     all.push_back(i);
                     return true;
                   }).ok());
    for (const ChunkInfo& i : all) (void)(*t)->Check(i);
    EXPECT_EQ((*t)->Put(IdNo(ns_, 7), {}).code(), Code::kNotSupported);
    EXPECT_EQ((*t)->Remove(IdNo(ns_, 0)).code(), Code::kNotSupported);
    EXPECT_TRUE((*t)->Flush().ok());
  }
  if (kind() == Kind::kFs) {
    ASSERT_TRUE(internal::CollectPoolGarbage(root_, internal::GcOptions{.max_bytes = 0, .dry_run = true}).ok());
  }
  EXPECT_EQ(TreePrint(base_.path()), before);
}

TEST_P(HostileDirTest, ReadOnlyOpenOfAMissingOrEmptyTargetIsAnErrorAndCreatesNothing) {
  auto missing = OpenKind(kind(), root_ + "/typo", OpenSpec{.read_only = true});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_FALSE(Exists(root_ + "/typo"));
  EXPECT_FALSE(Exists(root_));
  fs::create_directories(root_);
  auto empty = OpenKind(kind(), root_, OpenSpec{.read_only = true});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(fs::is_empty(root_));
}

TEST_P(HostileDirTest, VerifyThreadsIsRangeCheckedAndServesVerifiedBytes) {
  const std::string scheme = kind() == Kind::kFile ? "file://" : "fs://";
  EXPECT_EQ(OpenTier(scheme + root_ + "?verify_threads=65").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(OpenTier(scheme + root_ + "?verify_threads=-1").status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(Exists(root_));
  // Chunks of several pieces (3 MiB), verified on two helper threads.
  const Namespace big = Namespace::Make("test/model", Layout{2, 2, 16, DType::kFP16, 24576}, "t").value();
  auto t = OpenTier(scheme + root_ + "?verify_threads=2");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(PutNo(**t, big, 0).ok());
  EXPECT_TRUE(GetNo(**t, big, 0).ok());
  FlipByte(ChunkFile(kind(), root_, IdNo(big, 0)), 4096 + (2u << 20) + 5);  // in the third piece
  EXPECT_TRUE(GetNo(**t, big, 0).IsCorruption());
}

INSTANTIATE_TEST_SUITE_P(Tiers, HostileDirTest, ::testing::Values(Kind::kFile, Kind::kFs),
                         [](const auto& info) { return KindName(info.param); });

// Earlier builds wrote file:// directories without a marker: such a directory is adopted, and its
// leftover temporaries (old naming) are recognised, while a folder of foreign files is still refused.
TEST(HostileLegacyTest, AnUnmarkedDirectoryOfEarlierFileTiersIsAdopted) {
  TempDir base;
  const std::string root = base.path() + "/legacy";
  const Namespace ns = TestNamespace();
  {
    auto t = OpenKind(Kind::kFile, root);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(PutNo(**t, ns, 0).ok());
  }
  fs::remove(root + "/KVTIER_DIR");
  WriteFile(root + "/kvtier.capacity", "10737418240\n");
  auto ro = OpenKind(Kind::kFile, root, OpenSpec{.read_only = true});
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_TRUE(GetNo(**ro, ns, 0).ok());
  auto rw = OpenKind(Kind::kFile, root);
  ASSERT_TRUE(rw.ok()) << rw.status().ToString();
  EXPECT_TRUE(Exists(root + "/KVTIER_DIR"));
}

}  // namespace
}  // namespace kvtier::testing
