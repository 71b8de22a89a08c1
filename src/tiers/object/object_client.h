// ObjectClient: the one thing a key/value object store (Redis, RADOS, S3, ...) implements to become a
// kvtier tier. Everything else -- chunk framing and verification, encryption, bytes-in-flight bounds,
// retries with backoff, timeouts, stats -- lives once in ObjectTier (object_tier.h).
//
// A client moves whole objects by name. It is thread-safe: ObjectTier calls it from several threads.
// Errors are kvtier::Status values: NotFound for a missing object (a miss, never an error), Status with
// retryable() set for what may succeed when tried again (timeouts, a node failing over, a redirection
// that needs a refreshed map), NoSpace when the store is full, InvalidArgument/IOError otherwise.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::object {

// One read of a batch. The client writes the object into `dst`, then (when set) its bytes past
// dst.size() into `rest`, piece after piece, and sets `bytes` to its full size; an object larger than
// Capacity() is not copied (bytes set, status InvalidArgument), so the tier can tell a foreign or
// damaged object from a miss.
//
// `rest` is given only to a client whose ScatterReads() is true: it lets the payload land straight in
// the caller's buffers (the tier passes a header-sized `dst` and the caller's pieces). A client sets
// `wrote` once any byte of the op has been written (so the tier knows a failed or retried op may have
// left bytes behind), and calls `landed` (when set), on whichever of its threads read the op, as soon
// as the op's whole object is in place with status OK: the tier verifies each object there, overlapped
// with the rest of the batch. `landed` must not call back into the client.
struct ObjectRead {
  std::string name;
  std::span<std::byte> dst;
  uint64_t bytes = 0;
  Status status;
  ScatterList rest{};
  bool wrote = false;
  std::function<void(ObjectRead&)> landed{};

  uint64_t Capacity() const { return dst.size() + TotalBytes(rest); }
};

// Lands a whole object held in `bytes` into `op` (dst, then rest), for clients that receive objects
// into buffers of their own; sets op.bytes and op.wrote, calls op.landed. Returns the op's status:
// OK, or InvalidArgument (nothing copied) when the object is larger than op.Capacity().
Status LandObject(ObjectRead& op, std::span<const std::byte> bytes);

// The buffers an op's object lands in, in the object's order: op.dst, then the pieces of op.rest
// (empty ones left out). For clients that hand the store one destination per buffer (a compound read).
std::vector<std::span<std::byte>> LandingPieces(const ObjectRead& op);

// Writes an object's bytes as they arrive (an HTTP body, a socket) across op.dst, then op.rest, with no
// staging. Refers to `op`, which must outlive it. Not thread-safe (one per transfer).
class ObjectLander {
 public:
  explicit ObjectLander(ObjectRead& op) : op_(op) {}
  // Copies `bytes` at the current position and sets op.wrote; false, copying nothing, when they would
  // pass op.Capacity() (an object larger than the destination).
  bool Append(std::span<const std::byte> bytes);
  uint64_t landed() const { return landed_; }

 private:
  ObjectRead& op_;
  size_t piece_ = 0;    // 0: op.dst; k > 0: op.rest[k - 1]
  size_t offset_ = 0;   // within that piece
  uint64_t landed_ = 0;
};

// Ends a read whose store answered with an object of `object_bytes` of which `landed_bytes` reached
// op's buffers: sets op.bytes and op.status -- InvalidArgument when the object is larger than
// op.Capacity(), a retryable IOError when fewer bytes landed than the object has (a short read), OK
// otherwise -- and calls op.landed when OK. `who` prefixes the messages ("rados", "s3").
void CompleteLanding(ObjectRead& op, uint64_t object_bytes, uint64_t landed_bytes, std::string_view who);

// One write of a batch: the object's bytes are the concatenation of `data`.
struct ObjectWrite {
  std::string name;
  GatherList data;
  Status status;
};

struct ObjectInfo {
  std::string name;
  uint64_t bytes = 0;
};

struct ObjectClientStats {
  uint64_t requests = 0;     // round trips to the store (a pipelined batch of k commands counts k)
  uint64_t retries = 0;      // requests the client itself repeated (e.g. after a redirection)
  uint64_t errors = 0;
};

class ObjectClient {
 public:
  virtual ~ObjectClient() = default;

  // What the client talks to, without credentials, e.g. "redis://127.0.0.1:7000 (cluster, 3 shards)".
  virtual std::string Describe() const = 0;

  // Whether GetMany honours ObjectRead::rest (reads land in the caller's pieces). Default: no.
  virtual bool ScatterReads() const { return false; }

  // Which server holds `name` as far as the client knows now (equal numbers: the same server), or 0
  // when it does not know (the default). A hint: ObjectTier spreads a batch's windows over the servers
  // with it, and a stale answer only costs speed.
  virtual uint64_t Placement(std::string_view /*name*/) const { return 0; }

  // Runs a batch; sets every op's status. The client overlaps the ops as its store allows (pipelines,
  // async operations, one connection per shard); the caller bounds the batch's bytes.
  virtual void GetMany(std::span<ObjectRead> ops) = 0;
  virtual void PutMany(std::span<ObjectWrite> ops) = 0;

  // OK when the object was removed or was not there.
  virtual Status Delete(std::string_view name) = 0;
  // Whether an object exists (NotFound is a false, not an error).
  virtual Result<bool> Exists(std::string_view name) = 0;
  // Every object whose name starts with `prefix`, until fn returns false. Objects written
  // concurrently may be missed.
  virtual Status List(std::string_view prefix, const std::function<bool(const ObjectInfo&)>& fn) = 0;

  virtual ObjectClientStats Stats() const = 0;
};

// What ObjectTier hands a backend's factory besides the URL (added after the interface above; the
// names above are unchanged). The shared options (object/object_options.h) are parsed by the tier;
// the factory reads only its own from the URL.
struct ObjectClientOptions {
  bool read_only = false;                       // only to look: create, write or delete nothing
  std::chrono::milliseconds timeout{0};         // per request (timeout_ms=); 0: the client's default
  std::chrono::milliseconds connect_timeout{0}; // per connection attempt (connect_timeout_ms=); 0: default
};

using ObjectClientFactory =
    std::function<Result<std::unique_ptr<ObjectClient>>(const TierUrl& url, const ObjectClientOptions& options)>;

}  // namespace kvtier::object
