// Engine: the reference inference engine. It serves prompts of many sessions from one paged KV pool
// and, when given a Store, reuses KV across sessions, evictions and processes:
//
//   Begin(session, prompt)   reserve pool blocks for prompt + output (evicting idle sessions' KV);
//                            keep the session's own resident KV when the prompt extends it
//   LoadCached(req)          Store::Lookup, then Store::Load straight into the reserved pool blocks
//   PrefillStep(req, n)      compute up to n of the remaining prompt tokens (chunk-aligned steps)
//   SaveNew(req)             Store::Save of the prompt's newly computed complete chunks
//   Decode(reqs)             one greedy token for each request, as one batch
//   End(req)                 the session becomes idle: its KV stays resident until the pool needs room
//
// Prefill(...) and Generate(...) chain these for callers that do not schedule.
//
// Thread-safety: every method may be called from any thread. Compute (PrefillStep, Decode) is
// serialised inside the engine, as on one accelerator; LoadCached and SaveNew do I/O without holding
// the compute lock, so loads of some requests overlap the compute of others. A Request is used by one
// thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_annotations.h"
#include "eval/engine/kv_pool.h"
#include "eval/engine/model_config.h"
#include "eval/engine/transformer.h"
#include "eval/engine/weights.h"
#include "kvtier/keys.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier::internal {

struct EngineOptions {
  ModelConfig model;
  std::shared_ptr<const Weights> weights;  // null: drawn from model.seed
  uint64_t pool_bytes = 64ull << 20;       // the stand-in for accelerator memory
  Store* store = nullptr;                  // not owned; null: no external tier (always recompute)
  std::string tenant = "default";
  bool save = true;                        // Save newly computed chunks into the store
  uint32_t prefill_step_tokens = 0;        // 0: tokens_per_chunk; rounded down to whole chunks
  int blas_threads = 0;                    // > 0: sets the OpenBLAS thread count
  // Simulated tensor-parallel ranks (docs/engine.md, "Tensor parallelism"): rank r keeps the KV heads
  // [r H / tp, (r + 1) H / tp) and computes the query heads that use them. A grouped layout only, whose
  // KV heads and query heads tp divides. Keys and namespace do not depend on it.
  uint32_t tp = 1;
};

// What one prompt cost and where its KV came from.
struct PrefillStats {
  uint32_t prompt_tokens = 0;
  uint32_t resident_tokens = 0;  // reused from the session's KV still in the pool
  uint32_t lookup_chunks = 0;    // chunks the store reported present
  uint32_t loaded_tokens = 0;    // loaded from the store (verified)
  uint32_t computed_tokens = 0;
  uint32_t saved_chunks = 0;
  uint64_t loaded_bytes = 0;
  double load_seconds = 0, compute_seconds = 0, save_seconds = 0;
};

class Engine;

// One prompt of one session, from Begin to End. Owned by the caller; not thread-safe.
// REQUIRES: every request that Begin returned is passed to End before it is destroyed (until then its
// session's pool blocks stay pinned).
class Request {
 public:
  const std::vector<uint32_t>& prompt() const { return prompt_; }
  const std::vector<uint32_t>& output() const { return output_; }  // greedy tokens so far
  // Logits of the last prompt token; filled when the prefill completes.
  const std::vector<float>& prompt_logits() const { return prompt_logits_; }
  const PrefillStats& stats() const { return stats_; }
  bool prefill_done() const { return computed_ == prompt_.size(); }
  uint32_t max_new_tokens() const { return max_new_; }

 private:
  friend class Engine;
  uint64_t session_ = 0;
  std::vector<uint32_t> prompt_, output_;
  std::vector<float> prompt_logits_;
  std::vector<ChunkKey> keys_;
  uint32_t computed_ = 0;  // prompt tokens whose KV is in the pool
  uint32_t max_new_ = 0;
  PrefillStats stats_;
  bool ended_ = false;
};

class Engine {
 public:
  // InvalidArgument for a bad model config; NoSpace when the pool holds no block.
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Busy when the pool cannot hold the request now because active requests use it (retry after an
  // End); NoSpace when it never could; InvalidArgument for an empty prompt or a session that already
  // has a request in flight.
  Result<std::unique_ptr<Request>> Begin(uint64_t session, std::span<const uint32_t> prompt,
                                         uint32_t max_new_tokens) EXCLUDES(mu_);
  // Loads the longest cached prefix (whole chunks, never the last prompt token) into the request's
  // blocks. A store failure is not an error: the unread part is computed instead.
  Status LoadCached(Request& req);
  // Computes up to `max_tokens` (0: one prefill step) of the remaining prompt. Returns the prompt
  // tokens still to compute; at 0 the first output token has been chosen (greedy).
  Result<uint32_t> PrefillStep(Request& req, uint32_t max_tokens = 0);
  // Saves the prompt's complete chunks that were computed here. Store errors are returned but leave
  // the request usable.
  Status SaveNew(Request& req);
  // Appends one greedy token to each request (prefill done, output below max_new_tokens), in one batch.
  Status Decode(std::span<Request* const> reqs);
  // Ends the request; its session's KV stays resident (idle) until evicted.
  void End(Request& req) EXCLUDES(mu_);

  // Begin + LoadCached + PrefillStep until done + SaveNew.
  Result<std::unique_ptr<Request>> Prefill(uint64_t session, std::span<const uint32_t> prompt,
                                           uint32_t max_new_tokens);
  // Decodes until `req` holds max_new_tokens outputs.
  Status Generate(Request& req);

  // Drops every idle session's KV (as if the pool had been needed by others).
  void EvictIdle() EXCLUDES(mu_);

  const ModelConfig& config() const { return options_.model; }
  const Namespace& ns() const { return ns_; }
  KvPool& pool() { return *pool_; }
  uint32_t prefill_step_tokens() const { return step_; }
  uint64_t evictions() const EXCLUDES(mu_);

 private:
  struct Resident {  // a session's blocks: in use by a request (active) or idle
    std::vector<uint32_t> blocks;
    std::vector<uint32_t> tokens;  // tokens whose KV is in the blocks
    bool active = false;
    uint64_t last_use = 0;
  };

  Engine(const EngineOptions& options, Namespace ns, std::unique_ptr<KvPool> pool);
  Status Reserve(Resident& res, uint32_t blocks_needed) REQUIRES(mu_);
  bool EvictOneIdle() REQUIRES(mu_);
  // The request's session; used without the lock afterwards (an active session is never erased, and
  // only its request's thread touches it).
  Resident& ResidentOf(const Request& req) EXCLUDES(mu_);
  static uint32_t Greedy(std::span<const float> logits);

  const EngineOptions options_;
  const Namespace ns_;
  std::unique_ptr<KvPool> pool_;
  uint32_t step_;

  Mutex compute_mu_;  // serialises the transformer (one "device")
  std::unique_ptr<Transformer> transformer_ PT_GUARDED_BY(compute_mu_);

  mutable Mutex mu_;  // guards the session table
  std::unordered_map<uint64_t, Resident> sessions_ GUARDED_BY(mu_);
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
