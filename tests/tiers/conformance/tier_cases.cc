#include "tiers/conformance/tier_cases.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>

#include "tiers/file/file_tier.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/mem/mem_tier.h"
#include "tiers/shm/shm_tier.h"
#include "core/chunk_format.h"
#include "tiers/object/object_names.h"
#include "tiers/redis/redis_harness.h"
#include "testing/fake_object_client.h"
#ifdef KVTIER_CONFORMANCE_CEPH
#include "tiers/ceph/ceph_harness.h"
#include "tiers/rados/rados_client.h"
#include "tiers/s3/s3_client.h"
#endif

namespace kvtier::testing {
namespace {

// One Redis per mode for the whole test process, started on first use through scripts/redis-cluster.sh
// and stopped at exit; each test keeps to its own prefix= (from its temporary directory's name).
redis::testing::LocalRedis* SharedRedis(int masters) {
  static std::unique_ptr<redis::testing::LocalRedis> single, cluster;
  static std::mutex mu;
  std::lock_guard lock(mu);
  auto& slot = masters == 1 ? single : cluster;
  if (!slot) {
    auto r = redis::testing::LocalRedis::Start(masters, 0);
    if (!r.ok()) return nullptr;
    slot = std::move(r).value();
  }
  return slot.get();
}

// Reads object `name` through `c`, flips a bit in its middle and writes it back.
Status FlipObjectByte(object::ObjectClient& c, const std::string& name) {
  std::vector<std::byte> buf(64 << 20);
  object::ObjectRead read{name, buf, 0, {}};
  c.GetMany(std::span(&read, 1));
  KVTIER_RETURN_IF_ERROR(read.status);
  buf.resize(read.bytes);
  buf[buf.size() / 2] ^= std::byte{0x40};
  const std::span<const std::byte> piece(buf);
  object::ObjectWrite write{name, GatherList(&piece, 1), {}};
  c.PutMany(std::span(&write, 1));
  return write.status;
}

std::string RedisPrefix(const std::string& dir) { return std::filesystem::path(dir).filename().string() + "/"; }

[[maybe_unused]] TierCase RedisCase(const std::string& name, int masters) {  // unused in the Ceph build
  return {name,
          [masters](const std::string& dir, uint64_t cap) {
            redis::testing::LocalRedis* r = SharedRedis(masters);
            if (r == nullptr) return std::string("redis://127.0.0.1:1?not_started=1");
            return r->url() + "?prefix=" + RedisPrefix(dir) + "&capacity=" + std::to_string(cap);
          },
          [masters](Tier&, const std::string& dir, const ChunkId& id) -> Status {
            redis::testing::LocalRedis* r = SharedRedis(masters);
            if (r == nullptr) return Status::IOError("redis not started");
            redis::RedisOptions options;
            options.seeds = *redis::ParseNodeList(r->url().substr(8));
            auto c = redis::OpenRedisClient(options);
            KVTIER_RETURN_IF_ERROR(c.status());
            return FlipObjectByte(**c, object::ChunkObjectName(RedisPrefix(dir), id));
          }};
}

#ifdef KVTIER_CONFORMANCE_CEPH
// rados:// rows: one cluster for the process (ceph_harness.h); each test in its own RADOS namespace.
std::string RadosNamespace(const std::string& dir) { return std::filesystem::path(dir).filename().string(); }

TierCase RadosCase() {
  return {"rados",
          [](const std::string& dir, uint64_t cap) {
            ceph_testing::LocalCeph* c = ceph_testing::LocalCeph::Shared();
            if (c == nullptr) return std::string("rados://kvtier?not_started=1");
            return "rados://kvtier/" + RadosNamespace(dir) + "?conf=" + c->conf() + "&capacity=" + std::to_string(cap);
          },
          [](Tier&, const std::string& dir, const ChunkId& id) -> Status {
            ceph_testing::LocalCeph* c = ceph_testing::LocalCeph::Shared();
            if (c == nullptr) return Status::IOError("ceph not started");
            rados::RadosOptions options;
            options.pool = "kvtier";
            options.ns = RadosNamespace(dir);
            options.conf = c->conf();
            KVTIER_ASSIGN_OR_RETURN(auto client, rados::OpenRadosClient(options));
            return FlipObjectByte(*client, object::ChunkObjectName("", id));
          }};
}

// s3:// rows on the same cluster's radosgw: one bucket, each test under its own prefix.
std::string S3Url(const std::string& dir) {
  ceph_testing::LocalCeph* c = ceph_testing::LocalCeph::Shared();
  if (c == nullptr || c->s3_url().empty()) return "s3://kvtier?not_started=1";
  std::string url = c->s3_url();  // s3://kvtier?endpoint=...&credentials_file=...
  return url.insert(url.find('?'), "/" + RadosNamespace(dir)) + "&create_bucket=1";
}

TierCase S3Case() {
  return {"s3",
          [](const std::string& dir, uint64_t cap) { return S3Url(dir) + "&capacity=" + std::to_string(cap); },
          [](Tier&, const std::string& dir, const ChunkId& id) -> Status {
            KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(S3Url(dir)));
            KVTIER_ASSIGN_OR_RETURN(s3::S3Options options, s3::ParseS3Options(url));
            KVTIER_ASSIGN_OR_RETURN(auto client, s3::OpenS3Client(options));
            return FlipObjectByte(*client, object::ChunkObjectName("", id));
          }};
}
#endif  // KVTIER_CONFORMANCE_CEPH

#ifndef KVTIER_CONFORMANCE_CEPH
// A 32-byte key file, mode 0600, in `dir` (the same bytes at every call).
std::string ShmKeyFile(const std::string& dir) {
  const std::string path = dir + "/shm-key";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 32; ++i) out.put(static_cast<char>(i * 37 + 11));
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}
#endif  // !KVTIER_CONFORMANCE_CEPH (the Ceph build has no shm rows)

}  // namespace

const std::vector<TierCase>& TierCases() {
#ifdef KVTIER_CONFORMANCE_CEPH
  // The Ceph build of the suite (tests/tiers/ceph/CMakeLists.txt): only the Ceph rows, one cluster per run.
  static const std::vector<TierCase> ceph_cases = [] {
    std::vector<TierCase> all;
    if (ceph_testing::SkipReason().empty()) {
      all.push_back(RadosCase());
      all.push_back(S3Case());
    } else {
      std::cout << "[ceph] rows skipped: " << ceph_testing::SkipReason() << std::endl;
    }
    return all;
  }();
  return ceph_cases;
#else
  // One row per tier. Add yours here.
  RegisterObjmemScheme();  // the object tier over its in-memory fake store (test binaries only)
  static const std::vector<TierCase> cases = {
      {"mem",
       [](const std::string&, uint64_t cap) {
         return "mem://?capacity=" + std::to_string(cap) + "&page=256&verify=true";
       },
       [](Tier& tier, const std::string&, const ChunkId& id) {
         return internal::CorruptMemChunkForTesting(tier, id);
       }},
      {"shm",  // the pool file in the test's directory (dir=), so it goes with it; resize=1: the suite
               // reopens with a smaller capacity on purpose, which shm:// refuses without it (issue 39)
       [](const std::string& dir, uint64_t cap) {
         return "shm://conformance?dir=" + dir + "&capacity=" + std::to_string(cap) + "&page=256&resize=1";
       },
       [](Tier& tier, const std::string&, const ChunkId& id) {
         return internal::CorruptShmChunkForTesting(tier, id);
       }},
      {"shm_key",  // the same, encrypted: every chunk sealed under a key file in the test's directory
       [](const std::string& dir, uint64_t cap) {
         return "shm://conformance?dir=" + dir + "&capacity=" + std::to_string(cap) + "&page=256&resize=1&key_file=" +
                ShmKeyFile(dir);
       },
       [](Tier& tier, const std::string&, const ChunkId& id) {
         return internal::CorruptShmChunkForTesting(tier, id);
       }},
      {"file",
       [](const std::string& dir, uint64_t cap) {
         return "file://" + dir + "?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return internal::CorruptFileChunkForTesting(dir, id);
       }},
      {"fs",
       [](const std::string& dir, uint64_t cap) {
         return "fs://" + dir + "/pool?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return internal::CorruptPoolChunkForTesting(dir + "/pool", id);
       }},
      {"objmem",
       [](const std::string& dir, uint64_t cap) {
         return "objmem://" + dir + "?capacity=" + std::to_string(cap);
       },
       [](Tier&, const std::string& dir, const ChunkId& id) {
         return FakeStoreAt(dir)->FlipByte(object::ChunkObjectName("", id), internal::kChunkHeaderSize);
       }},
  };
  static const std::vector<TierCase> with_redis = [] {
    std::vector<TierCase> all = cases;
    if (redis::testing::SkipReason().empty()) {  // redis:// rows where redis-server is installed
      all.push_back(RedisCase("redis_single", 1));
      all.push_back(RedisCase("redis_cluster", 3));
    }
    return all;
  }();
  return with_redis;
#endif
}

}  // namespace kvtier::testing
