// A really full disk: persistent tiers on a size-limited tmpfs (mounted here when this process may
// mount; otherwise the test says why it skips). Saves past the end fail softly (NoSpace or IOError,
// no crash), chunks already stored keep loading, no partial or temporary files remain, and the tier
// accepts saves again once space is freed.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kvtier/tier.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

// A tmpfs of `size` mounted at `dir`, unmounted on destruction.
class SmallFs {
 public:
  SmallFs(const std::string& dir, const std::string& size) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string opts = "size=" + size + ",mode=0700";
    if (mount("kvtier-reltest", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// 64 KiB chunks, so an 8 MiB filesystem fills after ~120 of them.
Layout BigLayout() {
  Layout l = SmallLayout();
  l.tokens_per_chunk = 512;
  return l;
}

class FullDisk : public ::testing::TestWithParam<std::string> {};

TEST_P(FullDisk, SavesFailSoftlyLoadsKeepWorkingNoPartialFiles) {
  TempDir tmp;
  const std::string mnt = tmp.path() + "/mnt";
  SmallFs small(mnt, "8m");
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a size-limited tmpfs here: " << small.error();
  // Capacity far above the filesystem: the disk, not the tier's budget, runs out.
  const std::string url = GetParam() + "://" + mnt + "/tier" +
                          "?capacity=1GiB";
  auto opened = OpenTier(url);
  if (!opened.ok() && opened.status().code() == Code::kInvalidArgument) {
    GTEST_SKIP() << opened.status().ToString();
  }
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Tier& tier = **opened;
  const Namespace ns = MakeNamespace("full", BigLayout());
  const auto keys = Keys(ns, 240, 31);  // about twice what fits
  std::vector<ChunkKey> stored;
  size_t failed = 0;
  for (const auto& k : keys) {
    const Status s = PutExpected(tier, ns, k);
    if (s.ok()) {
      stored.push_back(k);
      continue;
    }
    ++failed;
    EXPECT_TRUE(s.IsNoSpace() || s.code() == Code::kIOError) << s.ToString();
    EXPECT_FALSE(tier.Contains(ChunkId::Of(ns, k))) << "a failed save became visible";
  }
  EXPECT_GT(failed, 0u) << "the filesystem never filled up";
  EXPECT_GT(stored.size(), 0u);
  EXPECT_TRUE(FilesUnder(mnt, IsTempName).empty()) << "partial files left on the full disk";
  for (const auto& k : stored) {
    const Status s = GetAndVerify(tier, ns, k);
    EXPECT_TRUE(s.ok()) << "a stored chunk no longer loads on a full disk: " << s.ToString();
  }
  // Freeing space lets saves succeed again.
  for (size_t i = 0; i < stored.size() / 2; ++i) ASSERT_TRUE(tier.Remove(ChunkId::Of(ns, stored[i])).ok());
  EXPECT_TRUE(PutExpected(tier, ns, keys.back()).ok() || tier.Contains(ChunkId::Of(ns, keys.back())));
  EXPECT_TRUE(GetAndVerify(tier, ns, keys.back()).ok());
  std::printf("[reliability] %s:// on an 8 MiB tmpfs: %zu saves stored, %zu failed softly\n",
              GetParam().c_str(), stored.size(), failed);
}

INSTANTIATE_TEST_SUITE_P(PersistentTiers, FullDisk, ::testing::Values("file", "fs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier::reltest
