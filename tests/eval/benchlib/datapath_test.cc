#include "eval/benchlib/datapath.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "eval/benchlib/datapath_io.h"
#include "eval/benchlib/datapath_passes.h"
#include "io/chunk_io.h"
#include "kvtier/forwarding_tier.h"
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

// gpt-oss's shape, small: window layers 0 and 2 (window 24 tokens), full layers 1 and 3, 2 KV heads
// of 64, 16-token chunks of 32 KiB (the window group is the first half); 4 chunks, one hit of all 4.
DatapathConfig WindowConfig(const std::string& target) {
  DatapathConfig c;
  c.target = target;
  c.model.name = "window-small";
  c.model.model_id = "test/window-small";
  c.model.layout = ParseLayoutSpec(
                       "layers=4 tokens=16 window:layers=0-2/2,heads=2,dim=64,window=24,dtype=bf16 "
                       "kv:layers=1-3/2,heads=2,dim=64,dtype=bf16")
                       .value();
  c.total_bytes = 4 * (32u << 10);
  c.context_tokens = 64;
  c.inflight = {2 * (32u << 10)};
  c.run_fio = false;
  c.run_serial = false;
  c.run_encrypted = false;
  return c;
}

// The hit on a 64-token prefix: chunks 2 and 3 hold one of the last 24 tokens (40..63), so file://
// reads the window group of those two only; 2 half-chunks are not read. The minimum: 64 tokens of the
// 2 full layers and 24 of the 2 window layers, 1 KiB per token for each pair.
TEST(DatapathTest, WindowLayoutHitReadsTheWindowsOfTheLastChunksOnly) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto r = RunDatapath(WindowConfig("file://" + dir.path() + "?direct=false"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->chunk_bytes, 32u << 10);
  ASSERT_EQ(r->sweep.size(), 1u);
  EXPECT_EQ(r->sweep[0].kvtier.errors, 0u);
  ASSERT_TRUE(r->sweep[0].hit.has_value());
  const HitResult& h = *r->sweep[0].hit;
  EXPECT_EQ(h.tokens, 64u);
  EXPECT_EQ(h.chunks, 4u);
  EXPECT_EQ(h.loaded_chunks, 4u);
  EXPECT_EQ(h.errors, 0u);
  const uint64_t naive = 4 * (32u << 10), skipped = 2 * (16u << 10);
  EXPECT_EQ(h.naive_bytes, naive);
  EXPECT_EQ(h.skipped_bytes, skipped);
  EXPECT_EQ(h.bytes_read, naive - skipped);  // the tier's counter: what file:// read
  EXPECT_LT(h.bytes_read, h.naive_bytes);
  EXPECT_EQ(h.minimum_bytes, 64u * 1024 + 24u * 1024);
  EXPECT_GE(h.bytes_read, h.minimum_bytes);
  const nlohmann::json j = ToJson(*r)["sweep"][0]["hit"];
  EXPECT_EQ(j["bytes_read"].get<uint64_t>(), naive - skipped);
  EXPECT_EQ(j["minimum_bytes"].get<uint64_t>(), h.minimum_bytes);
  EXPECT_DOUBLE_EQ(j["ratio_to_naive"].get<double>(), 0.75);
  EXPECT_NE(FormatSummary(*r).find("64-token hit (4 chunks): read 96.00 KiB (98304 bytes)"), std::string::npos)
      << FormatSummary(*r);
  EXPECT_FALSE(std::filesystem::exists(r->target.directory)) << "bench files left behind";
}

// mem:// copies whole chunks (one checksum each): the same hit reads every byte, and skips none.
TEST(DatapathTest, WindowLayoutHitOnMemoryReadsWholeChunks) {
  auto r = RunDatapath(WindowConfig("mem://?verify=true"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sweep.size(), 1u);
  ASSERT_TRUE(r->sweep[0].hit.has_value());
  const HitResult& h = *r->sweep[0].hit;
  EXPECT_EQ(h.loaded_chunks, 4u);
  EXPECT_EQ(h.errors, 0u);
  EXPECT_EQ(h.bytes_read, h.naive_bytes);
  EXPECT_EQ(h.skipped_bytes, 0u);
}

TEST(DatapathTest, MinimumPrefixBytesCountsEachGroupKind) {
  const Layout l = ParseLayoutSpec(
                       "layers=4 tokens=16 window:layers=0,heads=2,dim=8,window=100,dtype=bf16 "
                       "kv:layers=1,heads=2,dim=8,dtype=bf16 latent:layers=2,dim=10,dtype=fp32 "
                       "state:layers=3,bytes=1000,dtype=bf16")
                       .value();
  // window: min(100, tokens) x 64; kv: tokens x 64; latent: tokens x 40; the state once.
  EXPECT_EQ(MinimumPrefixBytes(l, 32), 32u * 64 + 32 * 64 + 32 * 40 + 1000);
  EXPECT_EQ(MinimumPrefixBytes(l, 320), 100u * 64 + 320 * 64 + 320 * 40 + 1000);
  const Layout classic{2, 2, 8};  // 2 layers x K and V x 2 heads x 8 x bf16 = 128 bytes per token
  EXPECT_EQ(MinimumPrefixBytes(classic, 48), 48u * classic.BytesPerToken());
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
    ASSERT_TRUE(p.write.has_value()) << "every point has its write row";
    EXPECT_EQ(p.write->chunks, r->write.chunks);
    EXPECT_FALSE(p.write_reference.has_value()) << "a generic object client has no write reference";
  }
  EXPECT_EQ(r->sweep[0].inflight_bytes, 192ull << 10);
  const nlohmann::json j = ToJson(*r);
  EXPECT_TRUE(j["summary"]["ratio_to_reference"].is_number());
  EXPECT_TRUE(j["sweep"][1]["reference"]["gbps"].is_number());
  EXPECT_NE(FormatSummary(*r).find("raw client GETs"), std::string::npos);
  EXPECT_NE(j["reference_name"].get<std::string>().find("object/object_reference.h"), std::string::npos);
  // The bench removed its chunks and the reference its objects.
  EXPECT_EQ(testing::FakeStoreAt("/datapath-bench")->size(), 0u);
  // kvtier's chunks were removed before the reference wrote: each writes onto a store holding none
  // of the other's objects.
  EXPECT_EQ(testing::FakeStoreAt("/datapath-bench")->observed().max_objects, r->write.chunks);
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

// shm:// is written by a child process: when it cannot, the bench's error carries the child's reason.
TEST(DatapathTest, SharedMemoryWriterFailureSaysWhy) {
  TempDir dir;  // a plain directory, not a hugetlbfs mount
  ASSERT_FALSE(dir.path().empty());
  auto r = RunDatapath(SmallConfig("shm://datapath-why?capacity=8MiB&hugepages=" + dir.path()));
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("writer process"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a hugetlbfs mount"), std::string::npos) << msg;
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
  c.target = "redis://127.0.0.1:1";  // an object tier: the bounds hold whole objects (header included)
  p = PlanDatapath(c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->inflight.front(), p->chunk_bytes + 4096);
  EXPECT_EQ(p->inflight.back(), 16 * (p->chunk_bytes + 4096));
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
    ASSERT_TRUE(p.encrypted_write.has_value()) << "an encrypted write next to the plain one at every point";
    EXPECT_EQ(p.encrypted_write->chunks, r->write.chunks);
    EXPECT_GT(p.RatioEncryptedWriteToPlain(), 0);
    // A classic layout's hit reads every byte: 32768 tokens ask for more than --total holds, so the
    // hit is every chunk written.
    ASSERT_TRUE(p.hit.has_value());
    EXPECT_EQ(p.hit->chunks, r->write.chunks);
    EXPECT_EQ(p.hit->loaded_chunks, r->write.chunks);
    EXPECT_EQ(p.hit->errors, 0u);
    EXPECT_EQ(p.hit->bytes_read, r->write.bytes);
    EXPECT_EQ(p.hit->naive_bytes, r->write.bytes);
    EXPECT_EQ(p.hit->minimum_bytes, r->write.bytes);
    EXPECT_EQ(p.hit->skipped_bytes, 0u);
  }
  ASSERT_TRUE(r->serial_pread.has_value());
  EXPECT_EQ(r->serial_pread->chunks, r->write.chunks);
  // The encrypted row sets its write against the last point's plain write; the seal rate is the bound.
  ASSERT_TRUE(r->encrypted.has_value());
  EXPECT_DOUBLE_EQ(r->encrypted->plain_write.seconds, r->sweep.back().write->seconds);
  EXPECT_EQ(r->encrypted->read.errors, 0u);
  ASSERT_TRUE(r->seal_cpu.has_value());
  EXPECT_GT(r->seal_cpu->BytesPerSecond(), 0);
  EXPECT_TRUE(r->target.cold);
  EXPECT_EQ(r->repeat, 2u);
  EXPECT_FALSE(std::filesystem::exists(r->target.directory)) << "bench files left behind";
}

// Each run of a point takes kvtier's writes next to fio's and kvtier's read next to fio's, fio first in
// every second run, and the point's ratios are the runs' paired ratios.
TEST(DatapathTest, EachPassRunsNextToItsFioReferenceInAlternatingOrder) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  DatapathConfig c = SmallConfig("file://" + dir.path());
  c.inflight = {196608};
  c.repeat = 2;
  c.run_fio = true;
  c.run_serial = false;
  c.run_encrypted = false;
  std::vector<std::string> order;  // "kvtier write", "fio write", "kvtier read", "fio read"
  c.progress = [&](const std::string& line) {
    if (line.rfind("  write, ", 0) == 0) order.push_back("kvtier write");
    if (line.rfind("  read, ", 0) == 0) order.push_back("kvtier read");
    if (line.rfind("  fio write ", 0) == 0) order.push_back("fio write");
    if (line.rfind("  fio read ", 0) == 0) order.push_back("fio read");
  };
  auto r = RunDatapath(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (!r->fio_note.empty()) GTEST_SKIP() << "no fio reference here: " << r->fio_note;
  const std::vector<std::string> want = {"kvtier write", "fio write",    "kvtier read", "fio read",
                                         "fio write",    "kvtier write", "fio read",    "kvtier read"};
  EXPECT_EQ(order, want);
  ASSERT_EQ(r->sweep.size(), 1u);
  const SweepPoint& p = r->sweep[0];
  ASSERT_EQ(p.read_ratios_to_fio.size(), 2u);
  ASSERT_EQ(p.write_ratios_to_fio.size(), 2u);
  EXPECT_DOUBLE_EQ(p.RatioToFio(), (p.read_ratios_to_fio[0] + p.read_ratios_to_fio[1]) / 2);
  EXPECT_DOUBLE_EQ(p.RatioWriteToFio(), (p.write_ratios_to_fio[0] + p.write_ratios_to_fio[1]) / 2);
  EXPECT_EQ(p.kvtier.errors, 0u);
}

// Issue 39: the bench named failed reads and wrong bytes as one figure. A tier that fails chunk 1 and
// serves chunk 0 with another chunk's tag, reporting success: two errors, one of them wrong bytes.
class OneFailedOneWrongTier final : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  void GetMany(std::span<ReadOp> ops) override {
    inner().GetMany(ops);
    if (ops.size() < 2) return;
    ops[1].status = Status::IOError("injected");
    std::span<std::byte> first = ops[0].dst[0];
    first[0] ^= std::byte{0xFF};  // the tag: chunk 0 now carries other bytes, and the read says OK
  }
};

TEST(DatapathErrors, FailedReadsAndWrongBytesAreCountedApart) {
  auto m = FindModelPreset("qwen2.5-0.5b");
  ASSERT_TRUE(m.ok());
  m->layout.tokens_per_chunk = 16;
  auto area = ReadArea::Create(*m, 4);
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  auto mem = OpenTier("mem://?capacity=16MiB");
  ASSERT_TRUE(mem.ok());
  std::shared_ptr<Tier> inner = std::move(*mem);
  OneFailedOneWrongTier tier(inner);
  ASSERT_TRUE(WritePass(tier, *area).ok());
  const PhaseResult r = ReadPass(tier, &*area);
  EXPECT_EQ(r.errors, 2u);
  EXPECT_EQ(r.wrong_bytes, 1u);
  EXPECT_EQ(DatapathErrorLine(r.errors, r.wrong_bytes), "1 chunk reads failed, 1 returned wrong bytes");
}

}  // namespace
}  // namespace kvtier::internal
