#include "fs/pool_layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "fs/fs_test_support.h"

namespace kvtier::internal {
namespace {

using fstest::TempDir;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(PoolLayoutTest, ChunkPathFansOutByNamespaceAndKeyPrefix) {
  const Namespace ns = fstest::TestNamespace();
  const ChunkKey key = fstest::TestKeys(ns, 1)[0];
  const PoolLayout layout("/pool/");
  const std::string k = key.Hex();
  EXPECT_EQ(layout.root(), "/pool");
  EXPECT_EQ(layout.ChunkPath(ChunkId::Of(ns, key)),
            "/pool/v1/" + ns.Hex() + "/" + k.substr(0, 2) + "/" + k.substr(2, 2) + "/" + k + ".kvc");
}

TEST(PoolLayoutTest, ClassifiesEntries) {
  const std::string key(64, 'a');
  EXPECT_EQ(ClassifyPoolEntry(key + ".kvc"), PoolEntryKind::kChunk);
  EXPECT_EQ(ClassifyPoolEntry(key + ".kvc.tmp.123.4"), PoolEntryKind::kTemp);
  EXPECT_EQ(ClassifyPoolEntry(std::string(63, 'a') + ".kvc"), PoolEntryKind::kOther);
  EXPECT_EQ(ClassifyPoolEntry(std::string(64, 'G') + ".kvc"), PoolEntryKind::kOther);
  EXPECT_EQ(ClassifyPoolEntry("notes.txt"), PoolEntryKind::kOther);
}

TEST(PoolLayoutTest, MetaRoundTripsAndRefusesNewerVersions) {
  auto v = ParsePoolMeta(EncodePoolMeta(kPoolFormatVersion), "/p");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, kPoolFormatVersion);

  auto newer = ParsePoolMeta(EncodePoolMeta(kPoolFormatVersion + 1), "/p");
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), Code::kVersionMismatch);
  EXPECT_NE(newer.status().message().find("newer"), std::string::npos) << newer.status().message();
  EXPECT_NE(newer.status().message().find("/p"), std::string::npos);

  EXPECT_EQ(ParsePoolMeta("hello\n", "/p").status().code(), Code::kCorruption);
  EXPECT_EQ(ParsePoolMeta("kvtier-pool\nversion=x\n", "/p").status().code(), Code::kCorruption);
  EXPECT_EQ(ParsePoolMeta("kvtier-pool\nversion=0\n", "/p").status().code(), Code::kCorruption);
}

TEST(PoolLayoutTest, OpenPoolCreatesOnceAndValidates) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const PoolLayout layout(dir.path() + "/pool");
  EXPECT_TRUE(OpenPool(layout, /*create=*/false).IsNotFound());
  ASSERT_TRUE(OpenPool(layout, /*create=*/true).ok());
  struct stat st;
  EXPECT_EQ(::stat(layout.MetaPath().c_str(), &st), 0);
  EXPECT_EQ(::stat(layout.ChunkDir().c_str(), &st), 0);
  ASSERT_TRUE(OpenPool(layout, /*create=*/false).ok());  // reopening an existing pool

  WriteFile(layout.MetaPath(), EncodePoolMeta(kPoolFormatVersion + 1));
  const Status s = OpenPool(layout, /*create=*/true);
  EXPECT_EQ(s.code(), Code::kVersionMismatch) << s.ToString();
  // A newer pool is never rewritten as an older one.
  EXPECT_EQ(*ReadSmallFile(layout.MetaPath()), EncodePoolMeta(kPoolFormatVersion + 1));
}

TEST(PoolLayoutTest, OpenPoolRefusesAFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  WriteFile(dir.path() + "/plain", "x");
  EXPECT_EQ(OpenPool(PoolLayout(dir.path() + "/plain"), true).code(), Code::kInvalidArgument);
}

TEST(PoolLayoutTest, UsageRoundTrips) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const PoolLayout layout(dir.path());
  EXPECT_TRUE(ReadPoolUsage(layout).status().IsNotFound());
  ASSERT_TRUE(WritePoolUsage(layout, PoolUsage{12345, 67, 1700000000}).ok());
  auto u = ReadPoolUsage(layout);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->bytes, 12345u);
  EXPECT_EQ(u->chunks, 67u);
  EXPECT_EQ(u->scanned_at, 1700000000);
  WriteFile(layout.UsagePath(), "bytes=oops\n");
  EXPECT_TRUE(ReadPoolUsage(layout).status().IsCorruption());
}

}  // namespace
}  // namespace kvtier::internal
