#include "eval/benchlib/datapath.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "eval/benchlib/datapath_io.h"
#include "io/chunk_io.h"
#include "testing/fake_object_client.h"

namespace kvtier::internal {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvtier-datapath-test-XXXXXX";
    path_ = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A small model so a run moves only a few MiB: 24 x 2 x 64 bf16, 16 tokens = 192 KiB per chunk.
DatapathConfig SmallConfig(const std::string& target) {
  DatapathConfig c;
  c.target = target;
  auto m = FindModelPreset("qwen2.5-0.5b");
  EXPECT_TRUE(m.ok());
  c.model = *m;
  c.model.layout.tokens_per_chunk = 16;
  c.total_bytes = 4ull << 20;
  c.run_fio = false;
  return c;
}

TEST(DatapathTest, ObjectTierRunsWithTheRawClientReference) {
  testing::RegisterObjmemScheme();
  DatapathConfig c = SmallConfig("objmem:///datapath-bench");
  c.inflight = {192ull << 10, 768ull << 10};  // one and four chunks' payload
  auto r = RunDatapath(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sweep.size(), 2u);
  for (const SweepPoint& p : r->sweep) {
    EXPECT_EQ(p.kvtier.errors, 0u);
    EXPECT_EQ(p.kvtier.chunks, r->write.chunks);
    ASSERT_TRUE(p.reference.has_value());
    EXPECT_EQ(p.reference->errors, 0u);
    EXPECT_EQ(p.reference->chunks, r->write.chunks);
    EXPECT_EQ(p.reference->bytes, r->write.chunks * (r->chunk_bytes + 4096));  // same objects as kvtier's
    EXPECT_GT(p.RatioToReference(), 0);
  }
  EXPECT_EQ(r->sweep[0].inflight_bytes, 192ull << 10);
  const nlohmann::json j = ToJson(*r);
  EXPECT_TRUE(j["summary"]["ratio_to_reference"].is_number());
  EXPECT_TRUE(j["sweep"][1]["reference"]["gbps"].is_number());
  EXPECT_NE(FormatSummary(*r).find("raw client GETs"), std::string::npos);
  EXPECT_NE(j["reference_name"].get<std::string>().find("object/object_reference.h"), std::string::npos);
  // The bench removed its chunks and the reference its objects.
  EXPECT_EQ(testing::FakeStoreAt("/datapath-bench")->size(), 0u);
}

TEST(DatapathTest, RefusesATargetWithoutEnoughFreeSpace) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  DatapathConfig c = SmallConfig("file://" + dir.path() + "/kv");
  c.total_bytes = 1ull << 50;  // 1 PiB
  auto r = RunDatapath(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNoSpace);
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--total"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/kv")) << "refused, yet wrote something";
}

TEST(DatapathTest, RefusesAMemoryTargetLargerThanMemory) {
  DatapathConfig c = SmallConfig("mem://");
  c.total_bytes = 1ull << 50;
  auto r = RunDatapath(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNoSpace);
  EXPECT_NE(r.status().message().find("memory"), std::string::npos);
}

TEST(DatapathTest, CheckEnoughSpaceSaysHowMuch) {
  EXPECT_TRUE(CheckEnoughSpace("d", 10, 10, "x").ok());
  const Status s = CheckEnoughSpace("target directory /d", 1ull << 30, 3ull << 30, "a + b");
  EXPECT_EQ(s.code(), Code::kNoSpace);
  EXPECT_NE(s.message().find("1.00 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("3.00 GiB"), std::string::npos) << s.message();
}

// fio reads the tier's own chunk files, then writes as many files of its own: the plan needs room
// for twice the chunk files.
TEST(DatapathTest, PlanSweepsWholeChunksAndCountsChunkFileSpace) {
  DatapathConfig c = SmallConfig("file:///var/kv");
  c.run_fio = true;
  auto p = PlanDatapath(c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->chunk_bytes, 196608u);
  EXPECT_EQ(p->chunks, (4u << 20) / 196608u);
  ASSERT_EQ(p->inflight.size(), 5u);
  EXPECT_EQ(p->inflight.front(), p->chunk_bytes);
  EXPECT_EQ(p->inflight.back(), 16 * p->chunk_bytes);
  EXPECT_GE(p->need_bytes, 2 * p->chunks * StoredChunkBytes(p->chunk_bytes));
  EXPECT_LT(p->need_bytes, 3 * p->chunks * p->chunk_bytes);
  EXPECT_EQ(p->tier_dir.rfind("/var/kv/kvtier-bench.", 0), 0u);
  c.target = "not a url";
  EXPECT_EQ(PlanDatapath(c).status().code(), Code::kInvalidArgument);
}

TEST(DatapathTest, MemoryTargetRunsEndToEndWithoutErrors) {
  auto r = RunDatapath(SmallConfig("mem://"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sweep.size(), 1u);
  EXPECT_EQ(r->sweep[0].kvtier.errors, 0u);
  EXPECT_EQ(r->sweep[0].kvtier.chunks, r->write.chunks);
  ASSERT_TRUE(r->memcpy_ref.has_value());
  EXPECT_GT(r->memcpy_ref->bytes, 0u);
  ASSERT_TRUE(r->memcpy_parallel.has_value());
  EXPECT_GT(r->memcpy_parallel->bytes, 0u);
  EXPECT_GE(r->memcpy_parallel->chunks, 1u);  // threads
  EXPECT_TRUE(ToJson(*r)["summary"]["ratio_to_memcpy"].is_number());
  EXPECT_EQ(ToJson(*r)["schema"], kDatapathSchema);
  ASSERT_TRUE(r->sweep[0].write.has_value());  // the write row, against a memcpy of the same bytes
  ASSERT_TRUE(r->sweep[0].write_reference.has_value());
  EXPECT_GT(r->sweep[0].RatioWriteToReference(), 0);
  const nlohmann::json j = ToJson(*r);
  EXPECT_TRUE(j["sweep"][0]["ratio_write_to_reference"].is_number());
  EXPECT_TRUE(j["summary"]["min_ratio_write_to_reference"].is_number());
  EXPECT_TRUE(j["summary"]["min_ratio_write_to_fio"].is_null());
}

TEST(DatapathTest, FileTargetSweepsColdReadsWithoutErrors) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  DatapathConfig c = SmallConfig("file://" + dir.path() + "?direct=false");
  c.inflight = {196608, 4 * 196608};
  c.repeat = 2;
  auto r = RunDatapath(c);
  if (!r.ok() && r.status().message().find("scheme") != std::string::npos) {
    GTEST_SKIP() << "file:// is not built in: " << r.status().ToString();
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sweep.size(), 2u);
  for (const SweepPoint& p : r->sweep) {
    EXPECT_EQ(p.kvtier.errors, 0u) << p.inflight_bytes;
    EXPECT_EQ(p.kvtier.chunks, r->write.chunks);
    ASSERT_TRUE(p.write.has_value()) << "a write row at every point";
    EXPECT_EQ(p.write->chunks, r->write.chunks);
    EXPECT_FALSE(p.fio_write.has_value()) << "fio is off in this run";
  }
  ASSERT_TRUE(r->serial_pread.has_value());
  EXPECT_EQ(r->serial_pread->chunks, r->write.chunks);
  EXPECT_TRUE(r->target.cold);
  EXPECT_EQ(r->repeat, 2u);
  EXPECT_FALSE(std::filesystem::exists(r->target.directory)) << "bench files left behind";
}

}  // namespace
}  // namespace kvtier::internal
