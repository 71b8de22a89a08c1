// Chunk events: what a Store tells an observer about each chunk it stores, removes or sees evicted, and
// the publisher that sends them to routers over ZeroMQ in the shape of vLLM's KV event batches
// (docs/serve.md has the wire format and the sources it follows).
//
//   auto pub = EventPublisher::Open({.endpoint = "tcp://127.0.0.1:5557"}).value();
//   StoreOptions opt; opt.tiers = {...}; opt.observer = pub;
//   auto store = Store::Open(opt);  // its saves, removals and evictions are now published
//
// Thread-safety: an observer is called from many threads at once (savers, background writers, tiers
// evicting); EventPublisher is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/keys.h"
#include "kvtier/status.h"

namespace kvtier {

enum class ChunkEventKind : uint8_t {
  kStored = 0,   // a tier now holds the chunk (a Save, a background write or a promotion)
  kRemoved = 1,  // Store::Remove took it out of a tier
  kEvicted = 2,  // a tier evicted it to make room under its capacity
};
const char* ChunkEventKindName(ChunkEventKind kind);  // "stored", "removed", "evicted"

struct ChunkEvent {
  ChunkEventKind kind = ChunkEventKind::kStored;
  Digest ns{};
  ChunkKey key{};
  uint32_t tier = 0;               // index of the tier in the Store, fastest first
  const char* medium = "";         // static text: "CPU" (mem://, shm://), "DISK" (file://), "STORAGE" (others)
  uint32_t tokens_per_chunk = 0;   // stored events: the namespace's chunk size in tokens; else 0
};

struct ChunkObserverStats {
  uint64_t published = 0;  // events sent on
  uint64_t dropped = 0;    // events lost: the queue was full (a slow or stalled subscriber)
  uint32_t subscribers = 0;  // subscriptions the publisher currently knows of
};

class ChunkObserver {
 public:
  virtual ~ChunkObserver() = default;
  // Called on the thread that stored, removed or evicted the chunk, possibly with a tier's lock held:
  // must be quick, must never block, must not call the Store or its tiers.
  virtual void OnChunkEvent(const ChunkEvent& event) = 0;
  // What became of the events (StoreStats and the kvtier_events_* metrics show it). Default: zeros.
  virtual ChunkObserverStats Stats() const { return {}; }
};

struct EventPublisherOptions {
  // ZeroMQ endpoint the publisher binds, routers connect to it: "tcp://127.0.0.1:5557",
  // "tcp://127.0.0.1:*" (a free port: see endpoint()), "ipc:///run/kvtier/events".
  std::string endpoint;
  // The first frame of every message (vLLM: the topic; llm-d reads "kv@<pod>@<model>").
  std::string topic = "kvtier";
  // Events held between the Store and the publisher's thread; past it events are dropped and counted.
  uint32_t queue_events = 65536;
  // Most events in one batch (one message).
  uint32_t batch_events = 512;
  // ZeroMQ send high-water mark, in messages. Messages past it wait in the queue above (never the Store).
  int send_hwm = 1000;
  // Kernel send buffer of the socket, bytes (0: the system's default). Tests make it small.
  int send_buffer = 0;
  // The socket has no authentication: a tcp:// endpoint on anything but a loopback address (0.0.0.0, *,
  // an interface, a host name) is refused unless this is set, as kvtier serve refuses an exposed HTTP
  // listener without TLS and a token.
  bool allow_remote = false;
};

class EventPublisher : public ChunkObserver {
 public:
  // Binds the socket and starts the publishing thread. InvalidArgument for an empty or malformed
  // endpoint, a port outside 0..65535, a non-loopback tcp:// host without allow_remote, an ipc:// path
  // that exists and is not a dead socket of this user (libzmq would unlink it), or zero sizes; IOError
  // when ZeroMQ refuses the endpoint (say, a port in use).
  static Result<std::shared_ptr<EventPublisher>> Open(const EventPublisherOptions& options);
  // Sends what is queued (as long as the socket takes it without waiting), then stops the thread.
  ~EventPublisher() override = default;
  // The endpoint as bound, with the port the system chose for "tcp://HOST:*".
  virtual std::string endpoint() const = 0;
};

}  // namespace kvtier
