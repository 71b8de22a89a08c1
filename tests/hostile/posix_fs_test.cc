// The POSIX filesystem seam on its own, with openat2 and with the O_NOFOLLOW walk the kernel falls back
// to: names are plain and relative, links are never followed (at the end of a path or in the middle),
// only regular files are opened, and a FIFO never blocks an open.
#include <sys/stat.h>

#include <filesystem>

#include "hostile/hostile_util.h"
#include "io/filesystem.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

class PosixFsTest : public ::testing::TestWithParam<bool> {
 protected:
  PosixFsTest() {
    root_ = base_.path() + "/root";
    fs::create_directories(root_ + "/d");
    fs::create_directories(base_.path() + "/outside");
    WriteFile(base_.path() + "/outside/secret", "outside");
    WriteFile(root_ + "/d/file", "inside");
    fs::create_symlink(base_.path() + "/outside/secret", root_ + "/d/link");
    fs::create_directory_symlink(base_.path() + "/outside", root_ + "/dlink");
    ::mkfifo((root_ + "/d/fifo").c_str(), 0644);
    auto f = internal::OpenPosixFileSystem(root_, internal::PosixFsOptions{.use_openat2 = GetParam()});
    EXPECT_TRUE(f.ok());
    fs_ = *f;
  }
  TempDir base_;
  std::string root_;
  std::shared_ptr<internal::FileSystem> fs_;
};

TEST_P(PosixFsTest, OpensRegularFilesOnly) {
  EXPECT_TRUE(fs_->OpenForRead("d/file", false).ok());
  EXPECT_TRUE(fs_->OpenForRead("d/link", false).status().IsNotFound());
  EXPECT_TRUE(fs_->OpenForRead("dlink/secret", false).status().IsNotFound());
  EXPECT_TRUE(fs_->OpenForRead("d/fifo", false).status().IsCorruption());
  EXPECT_TRUE(fs_->OpenForRead("d", false).status().IsCorruption());
  EXPECT_TRUE(fs_->OpenForRead("d/none", false).status().IsNotFound());
}

TEST_P(PosixFsTest, RefusesNamesThatAreNotPlainAndRelative) {
  for (const char* bad : {"../outside/secret", "/etc/passwd", "d/../d/file", "./d/file", "d//file", "d/file/", ""}) {
    EXPECT_EQ(fs_->OpenForRead(bad, false).status().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(fs_->Unlink(bad).code(), Code::kInvalidArgument) << bad;
  }
}

TEST_P(PosixFsTest, NeverWritesRenamesOrRemovesThroughALink) {
  EXPECT_FALSE(fs_->CreateNew("dlink/new", false).ok());
  EXPECT_FALSE(fs_->Rename("d/file", "dlink/moved").ok());
  EXPECT_FALSE(fs_->Unlink("dlink/secret").ok());
  EXPECT_FALSE(fs_->MakeDir("dlink/sub").ok());
  EXPECT_FALSE(fs_->MakeDir("d/link").ok()) << "a link in place of a directory is not a directory";
  EXPECT_FALSE(fs_->Touch("dlink/secret").ok());
  EXPECT_FALSE(fs_->List("dlink").ok());
  EXPECT_FALSE(fs_->OpenLockFile("d/link").ok());
  EXPECT_FALSE(fs_->OpenLockFile("d/fifo").ok());
  EXPECT_TRUE(Exists(base_.path() + "/outside/secret"));
  EXPECT_FALSE(Exists(base_.path() + "/outside/new"));
  EXPECT_FALSE(Exists(base_.path() + "/outside/sub"));
  // Removing the link itself is a name in the root: allowed, and the target stays.
  EXPECT_TRUE(fs_->Unlink("d/link").ok());
  EXPECT_TRUE(Exists(base_.path() + "/outside/secret"));
}

TEST_P(PosixFsTest, StatAndListReportLinksWithoutFollowing) {
  auto st = fs_->Stat("d/link");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, internal::FileType::kSymlink);
  auto entries = fs_->List("d");
  ASSERT_TRUE(entries.ok());
  std::map<std::string, internal::FileType> types;
  for (const auto& e : *entries) types[e.name] = e.type;
  EXPECT_EQ(types["file"], internal::FileType::kRegular);
  EXPECT_EQ(types["link"], internal::FileType::kSymlink);
  EXPECT_EQ(types["fifo"], internal::FileType::kOther);
}

// Stat looks at the name itself: a link at the end is reported as a link, a link on the way is
// never crossed (the file beyond it is not found), and a FIFO is looked at without being opened.
TEST_P(PosixFsTest, StatNeverCrossesALinkAndNeverOpensWhatItLooksAt) {
  auto file = fs_->Stat("d/file");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->type, internal::FileType::kRegular);
  EXPECT_EQ(file->size, 6u);
  EXPECT_EQ(fs_->Stat("d")->type, internal::FileType::kDirectory);
  EXPECT_EQ(fs_->Stat("dlink")->type, internal::FileType::kSymlink);
  EXPECT_TRUE(fs_->Stat("dlink/secret").status().IsNotFound());
  EXPECT_TRUE(fs_->Stat("d/file/x").status().IsNotFound());
  EXPECT_TRUE(fs_->Stat("d/none").status().IsNotFound());
  EXPECT_TRUE(fs_->Stat("none/file").status().IsNotFound());
  auto fifo = fs_->Stat("d/fifo");  // would block forever if it were opened for reading
  ASSERT_TRUE(fifo.ok());
  EXPECT_EQ(fifo->type, internal::FileType::kOther);
  EXPECT_EQ(fs_->Stat("d/../d/file").status().code(), Code::kInvalidArgument);
}

TEST_P(PosixFsTest, ARootThatIsMissingIsCreatedOnlyWhenAsked) {
  EXPECT_TRUE(internal::OpenPosixFileSystem(base_.path() + "/new").status().IsNotFound());
  EXPECT_FALSE(Exists(base_.path() + "/new"));
  EXPECT_TRUE(internal::OpenPosixFileSystem(base_.path() + "/new/a", internal::PosixFsOptions{.create = true}).ok());
  EXPECT_EQ(internal::OpenPosixFileSystem("relative/dir").status().code(), Code::kInvalidArgument);
}

// Preallocate takes a new file's space at once: its size is the length asked for before anything is
// written, and the blocks are allocated (not a sparse file). Skipped where the filesystem has no fallocate.
TEST_P(PosixFsTest, PreallocateTakesTheFilesSpaceBeforeItsWrites) {
  auto fd = fs_->CreateNew("d/new");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const Status s = fs_->Preallocate(fd->get(), 1 << 20);
  if (s.code() == Code::kNotSupported) GTEST_SKIP() << s.ToString();
  ASSERT_TRUE(s.ok()) << s.ToString();
  struct stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_GE(st.st_blocks * 512, 1 << 20) << "the blocks are taken, not a hole";
}

INSTANTIATE_TEST_SUITE_P(Resolve, PosixFsTest, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "openat2" : "walk"); });

}  // namespace
}  // namespace kvtier::testing
