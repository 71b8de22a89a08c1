// The same-run reference of `kvtier bench datapath --target redis://...`: a raw hiredis client, none of
// kvtier's Redis client (no router, pool, direct reader, framing or verification), pipelined with the
// same values and connections in flight as kvtier's own traffic at the same bound (ReadShapeOf,
// WriteShapeOf), so its figures say what the servers serve to a plain client at that depth.
//
// It finds the masters with CLUSTER SLOTS on a seed (a single instance: the seed itself) and uses the
// first min(masters, values in flight) of them; value i lives on master i % that under a hash tag of
// its own. Writes: each connection thread keeps its share of the values in flight as pipelined
// `SET key value` (redisAppendCommandArgv, then redisBufferWrite; a new SET as each reply is read),
// timed, then the same for `GET key` (the reader's buffer is kept between replies: maxbuf = 0). Every
// reply is checked (SET: OK; GET: length and index tag). The keys are deleted at the end. The URL's
// password_file=, user= and timeouts apply. Connections are made before each clock starts.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::redis {

// Values in flight (all connections together) and connections to each master.
struct PipelineShape {
  uint64_t in_flight = 1;
  uint64_t conns_per_master = 1;
};

// kvtier's reads at a bound of `inflight_bytes` over values of `value_bytes` (ObjectTier::GetMany over
// RedisClient::GetMany): two windows of half the bound in flight when a value fits in half of it, else
// one window of the whole bound (at least one value); each window is one pipeline per master.
PipelineShape ReadShapeOf(uint64_t inflight_bytes, uint64_t value_bytes);
// kvtier's writes (ObjectTier::Put, one SET per call on a connection of the pool): the bound admits
// inflight / value Puts at once (at least one), on at most `conns_per_node` connections per master.
PipelineShape WriteShapeOf(uint64_t inflight_bytes, uint64_t value_bytes, uint64_t conns_per_node);

// One connection of the reference: its master, the values it moves in order and its pipeline depth.
struct PipelinePlan {
  uint64_t master = 0;
  std::vector<uint64_t> values;
  uint64_t depth = 1;
};
// Spreads values [0, count), value i on master i % masters, over min(in_flight, masters x
// conns_per_master) connections (connection k on master k % masters, at least one per master), with
// depths adding up to in_flight (at least one each). `masters` >= 1.
std::vector<PipelinePlan> PlanPipelines(uint64_t masters, uint64_t count, PipelineShape shape);

// One connection's sliding window: queues commands 0.. while fewer than `depth` are unanswered,
// flushes, reads one reply, and so on until `n` replies are read. send(k) queues command k, flush()
// writes what is queued, receive(k) reads reply k; any of them returning false (the connection
// failed) ends the pipeline. Returns the replies read.
struct PipelineSteps {
  std::function<bool(uint64_t)> send;
  std::function<bool()> flush;
  std::function<bool(uint64_t)> receive;
};
uint64_t RunPipeline(uint64_t n, uint64_t depth, const PipelineSteps& steps);

struct PlainRunResult {
  uint64_t values = 0;  // written (SET answered OK) or read back whole with the right tag
  uint64_t bytes = 0;   // their bytes
  uint64_t errors = 0;  // failed or wrong
  double seconds = 0;
};

struct PlainReferenceResult {
  PlainRunResult write, read;
};

// InvalidArgument on a bad URL; IOError when no node answers or a connection cannot be made. Errors of
// single commands are counted.
Result<PlainReferenceResult> PlainHiredisReference(const TierUrl& url, uint64_t value_bytes, uint64_t count,
                                                   PipelineShape write, PipelineShape read);

}  // namespace kvtier::redis
