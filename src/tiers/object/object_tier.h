// ObjectTier: a kvtier Tier over any key/value object store (S3, RADOS, Redis, ...) through an
// ObjectClient (object_client.h). Layers, data path and invariants: docs/architecture.md, "Object tiers".
//
//   object   one chunk = one object named by object_names.h, holding the chunk header and payload of
//            core/chunk_format.h without the 4 KiB tail padding files carry (nothing reads objects
//            with O_DIRECT); encrypted (AES-256-GCM) with key_file=.
//   read     GetMany cuts a batch into windows of at most inflight= bytes (one ByteBudget for every
//            call of the tier), after taking the ops round-robin over the servers the client places
//            them on (ObjectClient::Placement; server after server when one object is read at a time;
//            the caller's order when the client does not know), fetches each
//            window with one client GetMany, retries retryable
//            failures (object_retry.h) and verifies every object as it lands (header checksum,
//            namespace, key, layout, length, piece sums or GCM tags). A client with ScatterReads()
//            lands the payload straight in the caller's pieces and it is checked there; otherwise
//            the object lands in staging and its verified payload is copied out.
//            NotFound is a miss; a failed verification is Corruption: the object is deleted (unless
//            read-only) and counted; every failure but NotFound zeroes the destination.
//   write    Put encodes the chunk (plain: the caller's bytes are sent as they are), takes its bytes
//            from the budget and puts it with retries. With capacity= it first deletes the least
//            recently used objects this process knows (object_index.h) to stay within the bound.
//   open     with capacity= or read-only, the tier lists its names once to learn what is stored.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/tier_counters.h"
#include "io/byte_budget.h"
#include "kvtier/tier.h"
#include "tiers/object/object_client.h"
#include "tiers/object/object_index.h"
#include "tiers/object/object_options.h"
#include "tiers/object/object_retry.h"

namespace kvtier::object {

// What `kvtier stats` prints besides TierStats for an object tier.
struct ObjectTierReport {
  std::string client;            // ObjectClient::Describe()
  ObjectClientStats client_stats;
  uint64_t tier_retries = 0;     // op tries the tier repeated after a retryable error
  uint64_t gave_up = 0;          // ops that still failed when retries ran out
  uint64_t inflight_bytes = 0;   // the bound
};

class ObjectTier : public Tier {
 public:
  ObjectTier(std::unique_ptr<ObjectClient> client, ObjectTierOptions options, std::string url, bool read_only);

  // Lists the store to learn what is there when capacity= is set or the tier is read-only.
  Status Init();

  const std::string& url() const override { return url_; }
  TierCapabilities capabilities() const override;  // persistent and shared: the store outlives us
  bool Contains(const ChunkId& id) override;        // the client's Exists; an error is a false
  Status Put(const ChunkId& id, GatherList payload) override;
  Status Get(const ChunkId& id, ScatterList dst) override;  // GetMany of one
  void GetMany(std::span<ReadOp> ops) override;
  // Deletes the object (with retries); OK when it was not there.
  Status Remove(const ChunkId& id) override;
  // The client's List of the chunk names; other names under the prefix are skipped.
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override;
  Status Check(const ChunkInfo& info) override;  // fetches the whole object and verifies it
  TierStats Stats() const override;

  ObjectTierReport Report() const;
  ObjectClient& client() { return *client_; }
  const ObjectTierOptions& options() const { return options_; }

 private:
  // Whether `ops` are read two windows at a time (objects of at most half the bound), or one object
  // at a time.
  bool Overlaps(std::span<const ReadOp> ops) const;
  // Cuts `ops` into windows within the bound and reads them, two windows in flight at once.
  void ReadInWindows(std::span<ReadOp> ops);
  void ReadWindow(std::span<ReadOp> ops);
  // Checks an object that landed (whole in read.dst, or header in read.dst and payload in op.dst).
  Status Verify(const ReadOp& op, const ObjectRead& read) const;
  // `verdict`: Verify's result when it already ran as the object landed.
  void FinishRead(ReadOp& op, ObjectRead& read, const Status* verdict);
  Status VerifyRead(ReadOp& op, ObjectRead& read, const Status* verdict);
  // Reads a whole object whatever its size (for Check and for a size that disagrees with the caller's).
  Result<std::vector<std::byte>> FetchWhole(const std::string& name);
  void DropCorrupt(const std::string& name);
  void CountRetries(const RetryCounts& counts);

  const std::unique_ptr<ObjectClient> client_;
  const ObjectTierOptions options_;
  const std::string url_;
  const bool read_only_;
  internal::ByteBudget budget_;
  ObjectIndex index_;
  internal::TierCounters counters_;
  std::atomic<uint64_t> tier_retries_{0}, gave_up_{0};
};

// The report of `tier` when it is an ObjectTier (else nullopt-like: empty client string).
ObjectTierReport GetObjectTierReport(const Tier& tier);

}  // namespace kvtier::object
