#include "eval/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/latency.h"
#include "eval/engine/kernels.h"

namespace kvtier::internal {
namespace {

uint32_t DivUp(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.model.Validate());
  if (options.weights && (options.weights->layers.size() != options.model.layers ||
                          options.weights->embedding.size() !=
                              size_t{options.model.vocab} * options.model.hidden)) {
    return Status::InvalidArgument("weights do not match model config " + options.model.name);
  }
  KVTIER_ASSIGN_OR_RETURN(Namespace ns,
                          Namespace::Make(options.model.ModelId(), options.model.KvLayout(), options.tenant));
  if (options.tp == 0 || options.model.q_heads % options.tp != 0) {
    return Status::InvalidArgument(std::to_string(options.tp) + " tensor-parallel ranks do not divide the " +
                                   std::to_string(options.model.q_heads) + " query heads of " + options.model.name);
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<KvPool> pool,
                          KvPool::Create(options.model.KvLayout(), options.pool_bytes, options.tp));
  SetBlasThreads(options.blas_threads);
  return std::unique_ptr<Engine>(new Engine(options, std::move(ns), std::move(pool)));
}

Engine::Engine(const EngineOptions& options, Namespace ns, std::unique_ptr<KvPool> pool)
    : options_(options), ns_(std::move(ns)), pool_(std::move(pool)) {
  const uint32_t tpc = options_.model.tokens_per_chunk;
  step_ = std::max(tpc, options_.prefill_step_tokens / tpc * tpc);
  auto weights = options_.weights ? options_.weights : MakeRandomWeights(options_.model);
  transformer_ = std::make_unique<Transformer>(options_.model, std::move(weights), pool_.get());
}

Engine::~Engine() = default;

Result<std::unique_ptr<Request>> Engine::Begin(uint64_t session, std::span<const uint32_t> prompt,
                                               uint32_t max_new_tokens) {
  if (prompt.empty()) return Status::InvalidArgument("empty prompt");
  const uint32_t tpc = config().tokens_per_chunk;
  const uint32_t needed = DivUp(prompt.size() + max_new_tokens, tpc);
  if (needed > pool_->block_count()) {
    return Status::NoSpace("a prompt of " + std::to_string(prompt.size()) + " tokens (+" +
                           std::to_string(max_new_tokens) + " new) never fits a KV pool of " +
                           std::to_string(pool_->block_count()) + " blocks");
  }
  auto req = std::unique_ptr<Request>(new Request);
  req->session_ = session;
  req->prompt_.assign(prompt.begin(), prompt.end());
  req->max_new_ = max_new_tokens;
  req->stats_.prompt_tokens = static_cast<uint32_t>(prompt.size());
  req->keys_ = ComputeChunkKeys(ns_, prompt);

  MutexLock lock(mu_);
  Resident& res = sessions_[session];
  if (res.active) return Status::InvalidArgument("session " + std::to_string(session) + " is busy");
  // Keep the whole chunks of resident KV that the prompt repeats, never the last prompt token.
  size_t same = 0;
  while (same < res.tokens.size() && same < prompt.size() && res.tokens[same] == prompt[same]) ++same;
  const uint32_t keep = static_cast<uint32_t>(std::min(same, prompt.size() - 1) / tpc);
  if (res.blocks.size() > keep) {
    pool_->Free(std::span<const uint32_t>(res.blocks).subspan(keep));
    res.blocks.resize(keep);
  }
  res.tokens.resize(size_t{keep} * tpc);
  KVTIER_RETURN_IF_ERROR(Reserve(res, needed));
  res.active = true;
  req->computed_ = keep * tpc;
  req->stats_.resident_tokens = keep * tpc;
  return req;
}

Status Engine::Reserve(Resident& res, uint32_t blocks_needed) {
  while (res.blocks.size() < blocks_needed) {
    auto got = pool_->Allocate(blocks_needed - static_cast<uint32_t>(res.blocks.size()));
    if (got.ok()) {
      res.blocks.insert(res.blocks.end(), got->begin(), got->end());
      break;
    }
    if (!EvictOneIdle()) {
      return Status::Busy("KV pool full: " + std::to_string(pool_->free_blocks()) + " of " +
                          std::to_string(pool_->block_count()) + " blocks free, the rest in use");
    }
  }
  return Status::OK();
}

bool Engine::EvictOneIdle() {
  auto victim = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->second.active || it->second.blocks.empty()) continue;
    if (victim == sessions_.end() || it->second.last_use < victim->second.last_use) victim = it;
  }
  if (victim == sessions_.end()) return false;
  pool_->Free(victim->second.blocks);
  sessions_.erase(victim);
  ++evictions_;
  return true;
}

void Engine::EvictIdle() {
  MutexLock lock(mu_);
  while (EvictOneIdle()) {
  }
}

uint64_t Engine::evictions() const {
  MutexLock lock(mu_);
  return evictions_;
}

Engine::Resident& Engine::ResidentOf(const Request& req) {
  MutexLock lock(mu_);
  return sessions_.at(req.session_);  // active sessions are never erased
}

Status Engine::LoadCached(Request& req) {
  Store* store = options_.store;
  const uint32_t tpc = config().tokens_per_chunk;
  const size_t first = req.computed_ / tpc;
  const size_t limit = (req.prompt_.size() - 1) / tpc;  // the last prompt token is always computed
  if (store == nullptr || req.ended_ || first >= limit) return Status::OK();
  auto t0 = std::chrono::steady_clock::now();
  std::span<const ChunkKey> keys(req.keys_.data(), limit);
  const size_t present = store->Lookup(ns_, keys);
  req.stats_.lookup_chunks = static_cast<uint32_t>(present);
  if (present > first) {
    const Resident& res = ResidentOf(req);
    std::vector<std::vector<std::span<std::byte>>> pieces;
    std::vector<ScatterList> dsts;
    pieces.reserve(present - first);
    for (size_t i = first; i < present; ++i) pieces.push_back(pool_->Pieces(res.blocks[i]));
    for (const auto& p : pieces) dsts.emplace_back(p);
    Result<size_t> loaded = store->Load(ns_, keys.subspan(first, present - first), dsts);
    // A failed or short load leaves garbage in the unread blocks; prefill overwrites it.
    const size_t n = loaded.ok() ? *loaded : 0;
    for (size_t i = 0; i < n; ++i) pool_->Replicate(res.blocks[first + i]);  // latent, state: every rank's copy
    req.computed_ = static_cast<uint32_t>((first + n) * tpc);
    req.stats_.loaded_tokens = static_cast<uint32_t>(n * tpc);
    req.stats_.loaded_bytes = n * pool_->block_bytes();
  }
  req.stats_.load_seconds += SecondsSince(t0);
  return Status::OK();
}

Result<uint32_t> Engine::PrefillStep(Request& req, uint32_t max_tokens) {
  const uint32_t tpc = config().tokens_per_chunk;
  const uint32_t total = static_cast<uint32_t>(req.prompt_.size());
  if (req.ended_) return Status::InvalidArgument("request already ended");
  if (req.computed_ == total) return 0u;
  const uint32_t step = max_tokens == 0 ? step_ : std::max(tpc, max_tokens / tpc * tpc);
  const uint32_t n = std::min(step, total - req.computed_);
  const Resident& res = ResidentOf(req);
  Segment seg;
  seg.blocks = res.blocks;
  seg.tokens = std::span<const uint32_t>(req.prompt_).subspan(req.computed_, n);
  seg.start = req.computed_;
  if (req.computed_ + n == total) {
    req.prompt_logits_.resize(config().vocab);
    seg.logits = req.prompt_logits_.data();
  }
  {
    MutexLock lock(compute_mu_);
    auto t0 = std::chrono::steady_clock::now();
    transformer_->Forward(std::span<const Segment>(&seg, 1));
    req.stats_.compute_seconds += SecondsSince(t0);
  }
  req.computed_ += n;
  req.stats_.computed_tokens += n;
  if (req.computed_ == total) req.output_.push_back(Greedy(req.prompt_logits_));
  return total - req.computed_;
}

Status Engine::SaveNew(Request& req) {
  Store* store = options_.store;
  const uint32_t tpc = config().tokens_per_chunk;
  const size_t first = (req.stats_.resident_tokens + req.stats_.loaded_tokens) / tpc;
  const size_t complete = req.computed_ / tpc;
  if (store == nullptr || !options_.save || req.ended_ || complete <= first) return Status::OK();
  auto t0 = std::chrono::steady_clock::now();
  const Resident& res = ResidentOf(req);
  std::vector<std::vector<std::span<const std::byte>>> pieces;
  std::vector<GatherList> srcs;
  pieces.reserve(complete - first);
  for (size_t i = first; i < complete; ++i) pieces.push_back(pool_->ConstPieces(res.blocks[i]));
  for (const auto& p : pieces) srcs.emplace_back(p);
  std::span<const ChunkKey> keys(req.keys_.data() + first, complete - first);
  Status s = store->Save(ns_, keys, srcs);
  if (s.ok()) req.stats_.saved_chunks += static_cast<uint32_t>(complete - first);
  req.stats_.save_seconds += SecondsSince(t0);
  return s;
}

Status Engine::Decode(std::span<Request* const> reqs) {
  std::vector<Segment> segs;
  std::vector<std::vector<float>> logits(reqs.size());
  segs.reserve(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request& r = *reqs[i];
    if (r.ended_ || !r.prefill_done() || r.output_.size() >= r.max_new_) {
      return Status::InvalidArgument("request cannot decode (prefill pending, ended or at its limit)");
    }
    logits[i].resize(config().vocab);
    Segment seg;
    seg.blocks = ResidentOf(r).blocks;
    seg.tokens = std::span<const uint32_t>(&r.output_.back(), 1);
    seg.start = static_cast<uint32_t>(r.prompt_.size() + r.output_.size() - 1);
    seg.logits = logits[i].data();
    segs.push_back(seg);
  }
  {
    MutexLock lock(compute_mu_);
    transformer_->Forward(segs);
  }
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i]->output_.push_back(Greedy(logits[i]));
  return Status::OK();
}

void Engine::End(Request& req) {
  if (req.ended_) return;
  req.ended_ = true;
  MutexLock lock(mu_);
  Resident& res = sessions_.at(req.session_);
  res.tokens.assign(req.prompt_.begin(), req.prompt_.begin() + req.computed_);
  if (req.prefill_done() && !req.output_.empty()) {
    res.tokens.insert(res.tokens.end(), req.output_.begin(), req.output_.end() - 1);
  }
  res.active = false;
  res.last_use = ++clock_;
}

Result<std::unique_ptr<Request>> Engine::Prefill(uint64_t session, std::span<const uint32_t> prompt,
                                                 uint32_t max_new_tokens) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Request> req, Begin(session, prompt, max_new_tokens));
  Status s = LoadCached(*req);
  while (s.ok() && !req->prefill_done()) s = PrefillStep(*req).status();
  if (!s.ok()) {
    End(*req);
    return s;
  }
  // Saving is best effort: a store that refuses a chunk costs a future hit, not this answer.
  (void)SaveNew(*req);
  return req;
}

Status Engine::Generate(Request& req) {
  Request* one[] = {&req};
  while (req.output_.size() < req.max_new_) KVTIER_RETURN_IF_ERROR(Decode(one));
  return Status::OK();
}

uint32_t Engine::Greedy(std::span<const float> logits) {
  return static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace kvtier::internal
