#include "tiers/fs/pool_layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "io/dir_names.h"

namespace kvtier::internal {
namespace {

using fstest::TempDir;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PoolLayoutTest, ChunkPathFansOutByNamespaceAndKeyPrefix) {
  const Namespace ns = fstest::TestNamespace();
  const ChunkKey key = fstest::TestKeys(ns, 1)[0];
  const std::string k = key.Hex();
  EXPECT_EQ(ChunkRelPath(PoolDirSpec(), ChunkId::Of(ns, key)),
            "v1/" + ns.Hex() + "/" + k.substr(0, 2) + "/" + k.substr(2, 2) + "/" + k + ".kvc");
  EXPECT_EQ(PoolChunkPathForTesting("/pool", ChunkId::Of(ns, key)),
            "/pool/v1/" + ns.Hex() + "/" + k.substr(0, 2) + "/" + k.substr(2, 2) + "/" + k + ".kvc");
}

// Only names kvtier makes are chunks or temporaries; earlier builds' temporaries still parse when their
// final name is a chunk, and a user's "*.tmp.*" never does.
TEST(PoolLayoutTest, ClassifiesNames) {
  const std::string key(64, 'a');
  auto is_chunk = [](std::string_view n) { return ParseChunkFileName(n).has_value(); };
  EXPECT_TRUE(ParseChunkFileName(key + ".kvc").has_value());
  EXPECT_FALSE(ParseChunkFileName(std::string(63, 'a') + ".kvc").has_value());
  EXPECT_FALSE(ParseChunkFileName(std::string(64, 'G') + ".kvc").has_value());
  EXPECT_FALSE(ParseChunkFileName("notes.txt").has_value());
  const std::string fresh = MakeTempName(key + ".kvc");
  auto t = ParseTempName(fresh, is_chunk);
  ASSERT_TRUE(t.has_value()) << fresh;
  EXPECT_EQ(t->final_name, key + ".kvc");
  EXPECT_EQ(t->writer, LocalWriterId());
  auto legacy = ParseTempName(key + ".kvc.tmp.123.4.5", is_chunk);
  ASSERT_TRUE(legacy.has_value());
  EXPECT_FALSE(legacy->writer.has_value());
  EXPECT_EQ(legacy->pid, 123);
  EXPECT_FALSE(ParseTempName("thesis.tmp.1.2.3", is_chunk).has_value());
  EXPECT_FALSE(ParseTempName(key + ".kvc.tmp.123.4", is_chunk).has_value());  // not a full name
}

TEST(PoolLayoutTest, MarkerRoundTripsAndRefusesNewerVersions) {
  const ChunkDirSpec spec = PoolDirSpec();
  auto v = ParseDirMarker(EncodeDirMarker(spec, kPoolFormatVersion), spec, "/p");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, kPoolFormatVersion);

  auto newer = ParseDirMarker(EncodeDirMarker(spec, kPoolFormatVersion + 1), spec, "/p");
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), Code::kVersionMismatch);
  EXPECT_NE(newer.status().message().find("newer"), std::string::npos) << newer.status().message();
  EXPECT_NE(newer.status().message().find("/p"), std::string::npos);

  EXPECT_EQ(ParseDirMarker("hello\n", spec, "/p").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseDirMarker("kvtier-pool\nversion=x\n", spec, "/p").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseDirMarker("kvtier-pool\nversion=0\n", spec, "/p").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseDirMarker("kvtier-pool\nversion=99999999999999999999999\n", spec, "/p").status().code(),
            Code::kCorruption);
}

TEST(PoolLayoutTest, OpenPoolCreatesOnceAndValidates) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string root = dir.path() + "/pool";
  EXPECT_TRUE(OpenPool(root, ChunkDirOptions{.create = false}).status().IsNotFound());
  EXPECT_TRUE(OpenPool(root, ChunkDirOptions{.read_only = true}).status().IsNotFound());
  EXPECT_FALSE(std::filesystem::exists(root));  // neither made it
  ASSERT_TRUE(OpenPool(root, ChunkDirOptions{.create = true}).ok());
  struct stat st;
  EXPECT_EQ(::stat((root + "/" + std::string(kPoolMetaName)).c_str(), &st), 0);
  EXPECT_EQ(::stat((root + "/v1").c_str(), &st), 0);
  ASSERT_TRUE(OpenPool(root, ChunkDirOptions{.create = false}).ok());  // reopening an existing pool
  ASSERT_TRUE(OpenPool(root, ChunkDirOptions{.read_only = true}).ok());

  const std::string meta = root + "/" + std::string(kPoolMetaName);
  const std::string newer = EncodeDirMarker(PoolDirSpec(), kPoolFormatVersion + 1);
  WriteFile(meta, newer);
  auto s = OpenPool(root, ChunkDirOptions{.create = true});
  EXPECT_EQ(s.status().code(), Code::kVersionMismatch) << s.status().ToString();
  // A newer pool is never rewritten as an older one.
  EXPECT_EQ(ReadFile(meta), newer);
}

TEST(PoolLayoutTest, OpenPoolRefusesAFileAndADirectoryOfOtherFiles) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  WriteFile(dir.path() + "/plain", "x");
  EXPECT_EQ(OpenPool(dir.path() + "/plain", ChunkDirOptions{}).status().code(), Code::kInvalidArgument);
  // A non-empty directory without the marker is someone else's: refused, and left unmarked.
  EXPECT_EQ(OpenPool(dir.path(), ChunkDirOptions{}).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + std::string(kPoolMetaName)));
}

TEST(PoolLayoutTest, UsageRoundTrips) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  auto pool = OpenPool(dir.path(), ChunkDirOptions{});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_TRUE(ReadPoolUsage(**pool).status().IsNotFound());
  ASSERT_TRUE(WritePoolUsage(**pool, PoolUsage{12345, 67, 1700000000}).ok());
  auto u = ReadPoolUsage(**pool);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->bytes, 12345u);
  EXPECT_EQ(u->chunks, 67u);
  EXPECT_EQ(u->scanned_at, 1700000000);
  EXPECT_EQ(ParsePoolUsage(EncodePoolUsage(*u))->bytes, 12345u);
  WriteFile(dir.path() + "/" + std::string(kPoolUsageName), "bytes=oops\n");
  EXPECT_TRUE(ReadPoolUsage(**pool).status().IsCorruption());
  EXPECT_TRUE(ParsePoolUsage("bytes=99999999999999999999999\nchunks=1\nscanned_at=1\n").status().IsCorruption());
  // A read-only pool writes nothing.
  auto ro = OpenPool(dir.path(), ChunkDirOptions{.read_only = true});
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_FALSE(WritePoolUsage(**ro, PoolUsage{1, 1, 1}).ok());
  EXPECT_EQ(ReadFile(dir.path() + "/" + std::string(kPoolUsageName)), "bytes=oops\n");
}

}  // namespace
}  // namespace kvtier::internal
