// ObjectTier over the fake store: retries, verification of damaged and foreign objects, encryption,
// the bytes-in-flight bound, names and options. Nothing waits: backoff delays are recorded.
#include <thread>

#include "core/chunk_format.h"
#include "tiers/object/object_test_util.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using object::ObjectTierOptions;

class ObjectTierTest : public ObjectTierTestBase {
 protected:
  static constexpr uint64_t kObjectBytes = internal::kChunkHeaderSize + 3000;  // one fake chunk's object

  // A tier whose reads keep at most `bound` bytes in flight.
  std::unique_ptr<object::ObjectTier> OpenBounded(uint64_t bound) {
    ObjectTierOptions o;
    o.inflight_bytes = bound;
    return Open(o);
  }

  // Puts the fake chunks `first` .. `first + n - 1`; their ids in that order.
  std::vector<ChunkId> PutChunks(Tier& tier, uint32_t first, uint32_t n) {
    std::vector<ChunkId> ids;
    for (uint32_t i = 0; i < n; ++i) {
      ids.push_back(ObjId(ns_, first + i));
      EXPECT_TRUE(Put(tier, ids.back()).ok()) << first + i;
    }
    return ids;
  }
};

// One read per id, each into a destination of its own of the fake chunks' 3000 payload bytes.
struct ReadBatch {
  std::vector<std::vector<std::byte>> out;
  std::vector<std::span<std::byte>> pieces;
  std::vector<ReadOp> ops;

  explicit ReadBatch(const std::vector<ChunkId>& ids) : out(ids.size(), std::vector<std::byte>(3000)) {
    for (auto& b : out) pieces.emplace_back(b);  // complete before any op points into it
    for (size_t i = 0; i < ids.size(); ++i) ops.push_back(ReadOp{ids[i], ScatterList(&pieces[i], 1), Status::OK()});
  }
};

TEST_F(ObjectTierTest, MissLeavesTheDestinationUntouched) {
  auto tier = Open();
  std::vector<std::byte> out;
  EXPECT_TRUE(Get(*tier, ObjId(ns_, 1), &out).IsNotFound());
  EXPECT_EQ(out, std::vector<std::byte>(3000, std::byte{0xEE}));
  EXPECT_EQ(tier->Stats().misses, 1u);
}

TEST_F(ObjectTierTest, ObjectIsHeaderAndPayloadWithoutPadding) {
  auto tier = Open();
  const ChunkId id = ObjId(ns_, 2);
  ASSERT_TRUE(Put(*tier, id).ok());
  EXPECT_EQ(store_->Bytes(Name(id)).size(), internal::kChunkHeaderSize + 3000);
  std::vector<std::byte> out;
  ASSERT_TRUE(Get(*tier, id, &out).ok());
  EXPECT_EQ(out, ObjPayload(id, 3000));
}

TEST_F(ObjectTierTest, RetryableErrorsAreRetriedThenSucceed) {
  auto tier = Open();
  const ChunkId id = ObjId(ns_, 3);
  store_->FailNext(2, Status::IOError("node failing over", /*retryable=*/true));
  ASSERT_TRUE(Put(*tier, id).ok());
  EXPECT_EQ(sleeps_.size(), 2u);
  store_->FailNext(3, Status::Busy("loading"));
  std::vector<std::byte> out;
  ASSERT_TRUE(Get(*tier, id, &out).ok());
  EXPECT_EQ(out, ObjPayload(id, 3000));
  EXPECT_EQ(sleeps_.size(), 5u);
  const object::ObjectTierReport r = tier->Report();
  EXPECT_EQ(r.tier_retries, 5u);
  EXPECT_EQ(r.gave_up, 0u);
  EXPECT_EQ(r.client_stats.errors, 5u);
}

TEST_F(ObjectTierTest, RetriesRunOutThenTheErrorStandsAndNothingLeaks) {
  ObjectTierOptions o;
  o.retry.retries = 3;
  auto tier = Open(o);
  const ChunkId id = ObjId(ns_, 4);
  ASSERT_TRUE(Put(*tier, id).ok());
  store_->FailAlways(Status::IOError("timed out", /*retryable=*/true));
  std::vector<std::byte> out;
  const Status s = Get(*tier, id, &out);
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_TRUE(AllZero(out));
  EXPECT_EQ(sleeps_.size(), 3u);
  const ChunkId other = ObjId(ns_, 5);
  EXPECT_EQ(Put(*tier, other).code(), Code::kIOError);
  EXPECT_EQ(tier->Report().gave_up, 2u);
  EXPECT_EQ(tier->Stats().put_errors, 1u);
  EXPECT_EQ(tier->Stats().chunks, 1u);  // the failed put is not counted
  store_->ClearFaults();
  EXPECT_FALSE(store_->Has(Name(other)));
  ASSERT_TRUE(Get(*tier, id, &out).ok());  // the store recovered: the chunk is served again
}

TEST_F(ObjectTierTest, NonRetryableErrorIsNotRetried) {
  auto tier = Open();
  store_->FailNext(1, Status::IOError("permission denied"));
  EXPECT_EQ(Put(*tier, ObjId(ns_, 6)).code(), Code::kIOError);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(tier->Report().tier_retries, 0u);
}

TEST_F(ObjectTierTest, FullStoreIsNoSpaceAtOnce) {
  auto tier = Open();
  store_->FailPuts(Status::NoSpace("store full"));
  EXPECT_EQ(Put(*tier, ObjId(ns_, 8)).code(), Code::kNoSpace);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(tier->Stats().chunks, 0u);
}

TEST_F(ObjectTierTest, BackoffGrowsAndStaysWithinTheBudget) {
  ObjectTierOptions o;
  o.retry.retries = 50;
  o.retry.backoff = std::chrono::milliseconds(8);
  o.retry.budget = std::chrono::milliseconds(100);
  auto tier = Open(o);
  store_->FailAlways(Status::IOError("down", true));
  EXPECT_FALSE(Put(*tier, ObjId(ns_, 7)).ok());
  ASSERT_FALSE(sleeps_.empty());
  std::chrono::milliseconds total{0};
  for (size_t i = 0; i < sleeps_.size(); ++i) {
    EXPECT_LE(sleeps_[i].count(), std::min<int64_t>(100, int64_t{8} << i)) << i;
    total += sleeps_[i];
  }
  EXPECT_LE(total.count(), 100);
  EXPECT_LT(sleeps_.size(), 50u);  // the budget, not the count, ended it
}

TEST_F(ObjectTierTest, DamagedObjectsAreCorruptionDeletedAndZeroed) {
  auto tier = Open();
  struct Damage {
    const char* what;
    std::function<void(const ChunkId&)> apply;
  };
  const ChunkId donor = ObjId(ns_, 99);
  ASSERT_TRUE(Put(*tier, donor).ok());
  const std::vector<Damage> damages = {
      {"header byte", [&](const ChunkId& id) { ASSERT_TRUE(store_->FlipByte(Name(id), 40).ok()); }},
      {"payload byte", [&](const ChunkId& id) { ASSERT_TRUE(store_->FlipByte(Name(id), 4096 + 2999).ok()); }},
      {"truncated", [&](const ChunkId& id) { ASSERT_TRUE(store_->Truncate(Name(id), 4096 + 1000).ok()); }},
      {"shorter than a header", [&](const ChunkId& id) { ASSERT_TRUE(store_->Truncate(Name(id), 100).ok()); }},
      {"foreign bytes", [&](const ChunkId& id) { store_->Set(Name(id), ObjPayload(donor, 4096 + 3000)); }},
      {"another chunk's object", [&](const ChunkId& id) { store_->Set(Name(id), store_->Bytes(Name(donor))); }},
      {"larger foreign object", [&](const ChunkId& id) { store_->Set(Name(id), ObjPayload(donor, 9000)); }},
  };
  uint32_t i = 10;
  for (const Damage& d : damages) {
    const ChunkId id = ObjId(ns_, i++);
    ASSERT_TRUE(Put(*tier, id).ok());
    d.apply(id);
    std::vector<std::byte> out;
    EXPECT_TRUE(Get(*tier, id, &out).IsCorruption()) << d.what;
    EXPECT_TRUE(AllZero(out)) << d.what;
    EXPECT_FALSE(store_->Has(Name(id))) << d.what;
    EXPECT_TRUE(Get(*tier, id, &out).IsNotFound()) << d.what;
  }
  EXPECT_EQ(tier->Stats().corrupt, damages.size());
  std::vector<std::byte> out;
  EXPECT_TRUE(Get(*tier, donor, &out).ok());
}

TEST_F(ObjectTierTest, ReadOnlyTierReportsCorruptionAndKeepsTheObject) {
  auto writer = Open();
  const ChunkId id = ObjId(ns_, 30);
  ASSERT_TRUE(Put(*writer, id).ok());
  ASSERT_TRUE(store_->FlipByte(Name(id), 5000).ok());
  auto reader = Open({}, /*read_only=*/true);
  EXPECT_EQ(reader->Stats().chunks, 1u);  // listed at open
  EXPECT_TRUE(reader->Check(ChunkInfo{id, 0}).IsCorruption());
  std::vector<std::byte> out;
  EXPECT_TRUE(Get(*reader, id, &out).IsCorruption());
  EXPECT_TRUE(store_->Has(Name(id)));
  EXPECT_EQ(Put(*reader, id).code(), Code::kNotSupported);
  EXPECT_EQ(reader->Remove(id).code(), Code::kNotSupported);
}

TEST_F(ObjectTierTest, EncryptedRoundTripAndWrongKey) {
  TempDir dir;
  ObjectTierOptions enc;
  enc.cipher = *internal::ChunkCipher::FromKeyFile(WriteKeyFile(dir.path(), 1));
  auto tier = Open(enc);
  const ChunkId id = ObjId(ns_, 40);
  const size_t n = (3u << 20) + 5;  // several pieces
  ASSERT_TRUE(Put(*tier, id, n).ok());
  const std::vector<std::byte> stored = store_->Bytes(Name(id));
  const std::vector<std::byte> plain = ObjPayload(id, n);
  ASSERT_EQ(stored.size(), internal::kChunkHeaderSize + n);
  EXPECT_FALSE(std::equal(plain.begin(), plain.begin() + 64, stored.begin() + internal::kChunkHeaderSize));
  std::vector<std::byte> out;
  ASSERT_TRUE(Get(*tier, id, &out, n).ok());
  EXPECT_EQ(out, plain);

  ObjectTierOptions other;
  other.cipher = *internal::ChunkCipher::FromKeyFile(WriteKeyFile(dir.path(), 2));
  auto wrong = Open(other, /*read_only=*/true);
  EXPECT_TRUE(Get(*wrong, id, &out, n).IsCorruption());
  EXPECT_TRUE(AllZero(out));
  auto keyless = Open({}, /*read_only=*/true);
  const Status s = Get(*keyless, id, &out, n);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("key_file"), std::string::npos) << s.ToString();  // says what is missing

  auto plain_tier = Open();
  const ChunkId p = ObjId(ns_, 41);
  ASSERT_TRUE(Put(*plain_tier, p).ok());
  EXPECT_TRUE(Get(*tier, p, &out).IsCorruption());  // an encrypted tier accepts only encrypted chunks
}

TEST_F(ObjectTierTest, BatchesAreCutIntoWindowsWithinTheBound) {
  const uint64_t bound = 6 * kObjectBytes;  // two windows of three objects in flight at once
  auto tier = OpenBounded(bound);
  const std::vector<ChunkId> ids = PutChunks(*tier, 50, 10);
  ReadBatch batch(ids);
  const uint64_t calls = store_->observed().get_calls;
  tier->GetMany(batch.ops);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(batch.ops[i].status.ok()) << i;
    EXPECT_EQ(batch.out[i], ObjPayload(ids[i], 3000)) << i;
  }
  EXPECT_EQ(store_->observed().get_calls - calls, 4u);  // 3 + 3 + 3 + 1
  EXPECT_EQ(store_->observed().max_batch_bytes, 3 * kObjectBytes);

  // Many threads at once: the bound holds for the tier as a whole.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      ReadBatch mine(ids);
      for (int round = 0; round < 20; ++round) tier->GetMany(mine.ops);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(store_->observed().max_inflight_bytes, bound);
}

TEST_F(ObjectTierTest, BoundBelowTwoObjectsReadsOneWindowAtATime) {
  auto tier = OpenBounded(kObjectBytes * 3 / 2);
  const std::vector<ChunkId> ids = PutChunks(*tier, 70, 5);
  ReadBatch batch(ids);
  const uint64_t calls = store_->observed().get_calls;
  tier->GetMany(batch.ops);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(batch.out[i], ObjPayload(ids[i], 3000)) << i;
  EXPECT_EQ(store_->observed().get_calls - calls, 5u);
  EXPECT_EQ(store_->observed().max_inflight_bytes, kObjectBytes);
}

// The client places the first three objects on server 1 and the rest on server 2: the tier takes them
// round-robin, so each window of two holds one of each, and every result lands where the caller asked.
TEST_F(ObjectTierTest, WindowsSpreadOverTheServersTheClientNames) {
  auto tier = OpenBounded(4 * kObjectBytes);  // two windows of two objects in flight at once
  std::vector<ChunkId> ids;
  for (uint32_t i = 0; i < 6; ++i) {
    ids.push_back(ObjId(ns_, i < 5 ? 80 + i : 99));  // 99 is never written: a miss
    if (i < 5) {
      ASSERT_TRUE(Put(*tier, ids.back()).ok());
    }
    store_->Place(Name(ids.back()), i < 3 ? 1 : 2);
  }
  ReadBatch batch(ids);
  tier->GetMany(batch.ops);
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(batch.ops[i].status.ok()) << i << ": " << batch.ops[i].status.ToString();
    EXPECT_EQ(batch.out[i], ObjPayload(ids[i], 3000)) << i;
  }
  EXPECT_TRUE(batch.ops[5].status.IsNotFound()) << batch.ops[5].status.ToString();
  const std::vector<std::vector<std::string>> batches = store_->get_batches();
  ASSERT_EQ(batches.size(), 3u);
  for (const auto& b : batches) {
    ASSERT_EQ(b.size(), 2u);
    EXPECT_NE(store_->PlacementOf(b[0]), store_->PlacementOf(b[1])) << b[0] << " and " << b[1];
  }
}

// One object at a time (a bound below two objects): server after server, the caller's order within
// each, whatever the order asked (servers 1, 2, 1, 2, 1, 2).
TEST_F(ObjectTierTest, OneObjectAtATimeReadsServerAfterServer) {
  auto tier = OpenBounded(kObjectBytes * 3 / 2);
  const std::vector<ChunkId> ids = PutChunks(*tier, 90, 6);
  for (uint32_t i = 0; i < 6; ++i) store_->Place(Name(ids[i]), 1 + i % 2);
  ReadBatch batch(ids);
  tier->GetMany(batch.ops);
  for (uint32_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(batch.ops[i].status.ok()) << i << ": " << batch.ops[i].status.ToString();
    EXPECT_EQ(batch.out[i], ObjPayload(ids[i], 3000)) << i;
  }
  std::vector<std::string> read;
  for (const auto& b : store_->get_batches()) read.insert(read.end(), b.begin(), b.end());
  const std::vector<uint32_t> want = {90, 92, 94, 91, 93, 95};
  ASSERT_EQ(read.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(read[k], Name(ObjId(ns_, want[k]))) << k;
}

TEST_F(ObjectTierTest, NamesRoundTripAndForeignNamesAreSkipped) {
  const ChunkId id = ObjId(ns_, 60);
  const std::string name = object::ChunkObjectName("pfx/", id);
  EXPECT_EQ(name.rfind("pfx/kvtier:2:" + DigestHex(id.ns) + ":", 0), 0u) << name;
  auto back = object::ParseChunkObjectName("pfx/", name);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ns, id.ns);
  EXPECT_EQ(back->key, id.key);
  EXPECT_FALSE(object::ParseChunkObjectName("", name).has_value());
  std::string upper = name;
  upper.back() = static_cast<char>(std::toupper(static_cast<unsigned char>(upper.back())));
  if (upper != name) {
    EXPECT_FALSE(object::ParseChunkObjectName("pfx/", upper).has_value());
  }

  ObjectTierOptions o;
  o.prefix = "pfx/";
  auto tier = Open(o);
  ASSERT_TRUE(Put(*tier, id).ok());
  EXPECT_TRUE(store_->Has(name));
  store_->Set("pfx/kvtier:2:not-a-chunk", {});
  store_->Set("pfx/other", {});
  std::vector<ChunkInfo> seen;
  ASSERT_TRUE(tier->List([&](const ChunkInfo& info) {
                    seen.push_back(info);
                    return true;
                  }).ok());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].id.key, id.key);
  EXPECT_EQ(seen[0].stored_bytes, internal::kChunkHeaderSize + 3000);
}

TEST_F(ObjectTierTest, ObjectEvictedBehindTheTiersBackIsAMiss) {
  auto tier = Open();
  const ChunkId id = ObjId(ns_, 70);
  ASSERT_TRUE(Put(*tier, id).ok());
  store_->Erase(Name(id));
  std::vector<std::byte> out;
  EXPECT_TRUE(Get(*tier, id, &out).IsNotFound());
  EXPECT_FALSE(tier->Contains(id));
}

TEST(ObjectTierOptionsTest, SharedOptionsParseAndUnknownOnesAreRefused) {
  auto url = *TierUrl::Parse("objx:///b?inflight=64MiB&retries=5&backoff_ms=3&timeout_ms=250&prefix=p:&zone=a");
  auto o = object::ParseObjectTierOptions(url, {"zone"}, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->inflight_bytes, 64ull << 20);
  EXPECT_EQ(o->retry.retries, 5u);
  EXPECT_EQ(o->retry.backoff.count(), 3);
  EXPECT_EQ(o->client.timeout.count(), 250);
  EXPECT_EQ(o->prefix, "p:");
  const Status unknown = object::ParseObjectTierOptions(url, {}, {}).status();
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.message().find("zone"), std::string::npos);
  EXPECT_FALSE(object::ParseObjectTierOptions(*TierUrl::Parse("objx:///b?inflight=0"), {}, {}).ok());
  EXPECT_FALSE(object::ParseObjectTierOptions(*TierUrl::Parse("objx:///b?retries=x"), {}, {}).ok());
}

}  // namespace
}  // namespace kvtier::testing
