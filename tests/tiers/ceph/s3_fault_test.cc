// s3:// on radosgw of a real single-host cluster (the binary's cluster: fault_cluster.h) under faults:
// wrong credentials are one clear error; objects deleted behind kvtier's back are misses; radosgw
// stopped gives failures (never wrong bytes, destinations zeroed) and after its restart every chunk
// loads again.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>

#include "tiers/ceph/fault_cluster.h"
#include "tiers/object/object_names.h"
#include "tiers/s3/s3_client.h"
#include "tiers/s3/s3_reference.h"
#include "store/store_fixture.h"

namespace kvtier::ceph_testing {
namespace {

class S3Fault : public kvtier::testing::StoreTestBase {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    ASSERT_NE(g_ceph, nullptr) << "the cluster did not start (see above)";
    ASSERT_FALSE(g_ceph->s3_url().empty());
  }
  // s3://kvtier/PREFIX?endpoint=...&credentials_file=...&create_bucket=1 + extra
  std::string Url(const std::string& prefix, const std::string& extra = "") const {
    std::string url = g_ceph->s3_url();
    return url.insert(url.find('?'), "/" + prefix) + "&create_bucket=1" + extra;
  }
  std::vector<std::byte> Payload(uint32_t i) const {
    std::vector<std::byte> p(64 << 10);
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<std::byte>(k * 7 + i);
    return p;
  }
  ChunkId Id(uint32_t i) const { return ChunkId::Of(ns_, Keys(1, 500 + i)[0]); }
};

TEST_F(S3Fault, WrongCredentialsAreOneClearError) {
  const std::string bad = g_ceph->dir() + "/bad.credentials";
  std::ofstream(bad) << "[default]\naws_access_key_id = KVTIERTESTACCESS0001\naws_secret_access_key = wrong\n";
  ::chmod(bad.c_str(), 0600);  // a secret: owner-only, or kvtier refuses it
  std::string url = Url("creds");
  url = url.substr(0, url.find("&credentials_file=")) + "&credentials_file=" + bad + "&create_bucket=1";
  auto t = OpenTier(url);
  ASSERT_FALSE(t.ok());
  std::cout << "[s3] wrong secret: " << t.status().ToString() << std::endl;
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("refused access key KVTIERTESTACCESS0001"), std::string::npos);
  std::ofstream(bad) << "[default]\naws_access_key_id = NOSUCHKEY\naws_secret_access_key = wrong\n";
  url = url.substr(0, url.find("&credentials_file=")) + "&credentials_file=" + bad;
  t = OpenTier(url);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  // And the URL never carries them.
  auto in_url = OpenTier(Url("creds", "&secret_key=x"));
  ASSERT_FALSE(in_url.ok());
  EXPECT_EQ(in_url.status().code(), Code::kInvalidArgument) << in_url.status().ToString();
}

TEST_F(S3Fault, ObjectsDeletedBehindTheTiersBackAreMisses) {
  auto t = OpenTier(Url("lifecycle"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto data = Payload(1);
  const std::span<const std::byte> piece(data);
  ASSERT_TRUE((*t)->Put(Id(1), GatherList(&piece, 1)).ok());
  ASSERT_TRUE((*t)->Put(Id(2), GatherList(&piece, 1)).ok());
  // A lifecycle rule (or another host) removes one object: here, a second client.
  auto parsed = TierUrl::Parse(Url("lifecycle"));
  ASSERT_TRUE(parsed.ok());
  auto options = s3::ParseS3Options(*parsed);
  ASSERT_TRUE(options.ok());
  auto other = s3::OpenS3Client(*options);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE((*other)->Delete(object::ChunkObjectName("", Id(1))).ok());
  std::vector<std::byte> out(data.size(), std::byte{1});
  const std::span<std::byte> dst(out);
  EXPECT_TRUE((*t)->Get(Id(1), ScatterList(&dst, 1)).IsNotFound());
  EXPECT_FALSE((*t)->Contains(Id(1)));
  ASSERT_TRUE((*t)->Get(Id(2), ScatterList(&dst, 1)).ok());
  EXPECT_TRUE(out == data);
  EXPECT_EQ((*t)->Stats().corrupt, 0u);
}

// The bench's raw libcurl reference (s3/s3_reference.h): PUTs with 5 in flight, GETs in windows of 5
// (23 objects: the last window short), every object checked, all deleted; a refused PUT is its error.
TEST_F(S3Fault, PlainCurlReferenceWritesAndReadsItsObjectsAndDeletesThem) {
  auto url = TierUrl::Parse(Url("refs"));
  ASSERT_TRUE(url.ok());
  auto r = s3::PlainCurlReference(*url, 100'000, 23, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectWholeRoundTrip(*r, 23, 100'000);
  auto options = s3::ParseS3Options(*url);
  ASSERT_TRUE(options.ok());
  auto client = s3::OpenS3Client(*options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ExpectNoObjectsLeft(**client);

  const std::string bad = g_ceph->dir() + "/badref.credentials";
  std::ofstream(bad) << "[default]\naws_access_key_id = KVTIERTESTACCESS0001\naws_secret_access_key = wrong\n";
  ::chmod(bad.c_str(), 0600);
  std::string bad_url = Url("refs");
  bad_url = bad_url.substr(0, bad_url.find("&credentials_file=")) + "&credentials_file=" + bad;
  auto refused = s3::PlainCurlReference(*TierUrl::Parse(bad_url), 1000, 3, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("refused access key KVTIERTESTACCESS0001"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(S3Fault, RadosgwRestartedRecovers) {
  auto t = OpenTier(Url("restart", "&retries=1&timeout_ms=3000&connect_timeout_ms=1000"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr uint32_t kChunks = 8;
  for (uint32_t i = 0; i < kChunks; ++i) {
    const auto d = Payload(i);
    const std::span<const std::byte> piece(d);
    ASSERT_TRUE((*t)->Put(Id(i), GatherList(&piece, 1)).ok());
  }
  ASSERT_TRUE(g_ceph->Run("rgw-stop").ok());
  std::vector<std::vector<std::byte>> out(kChunks, std::vector<std::byte>(64 << 10, std::byte{0x77}));
  std::vector<std::span<std::byte>> dsts(out.begin(), out.end());
  std::vector<ReadOp> ops;
  for (uint32_t i = 0; i < kChunks; ++i) ops.push_back(ReadOp{Id(i), ScatterList(&dsts[i], 1), Status::OK()});
  (*t)->GetMany(ops);
  for (uint32_t i = 0; i < kChunks; ++i) {
    EXPECT_FALSE(ops[i].status.ok()) << "chunk " << i << " read from a stopped radosgw";
    EXPECT_TRUE(ops[i].status.retryable()) << ops[i].status.ToString();
    EXPECT_TRUE(std::all_of(out[i].begin(), out[i].end(), [](std::byte b) { return b == std::byte{0}; }))
        << "a failed read zeroes its destination";
  }
  std::cout << "[s3] radosgw down: " << ops[0].status.ToString() << std::endl;
  ASSERT_TRUE(g_ceph->Run("rgw-start").ok());
  for (auto& op : ops) op.status = Status::OK();
  (*t)->GetMany(ops);
  for (uint32_t i = 0; i < kChunks; ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << "chunk " << i << ": " << ops[i].status.ToString();
    EXPECT_TRUE(out[i] == Payload(i)) << "chunk " << i;
  }
}

}  // namespace
}  // namespace kvtier::ceph_testing
