#include "eval/e2e/e2e_bench.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>

#include "core/work_dir.h"
#include "eval/engine/engine.h"
#include "kvtier/store.h"
#include "progress/progress.h"

namespace kvtier::internal {

namespace {

using Clock = std::chrono::steady_clock;

struct Plan {
  ModelConfig model;
  std::shared_ptr<const Weights> weights;
  Namespace ns;
  std::string dir;
  uint32_t max_sessions = 0;
  uint64_t pool_bytes = 0, mem_bytes = 0, disk_bytes = 0;
};

Status Validate(const E2eOptions& o) {
  if (o.concurrency.empty()) return Status::InvalidArgument("no concurrency level given");
  for (uint32_t c : o.concurrency) {
    if (c == 0 || c > kMaxE2eConcurrency) {
      return Status::InvalidArgument("concurrency must be in [1, " + std::to_string(kMaxE2eConcurrency) + "]");
    }
  }
  if (o.modes.empty()) return Status::InvalidArgument("no mode given");
  for (const std::string& m : o.modes) KVTIER_RETURN_IF_ERROR(MakeMode(m, "/x", 1, 1).status());
  const auto in = [](uint64_t v, uint64_t lo, uint64_t hi) { return v >= lo && v <= hi; };
  if (!in(o.workload.context_tokens, 1, kMaxE2eTokens) || !in(o.workload.turn_tokens, 1, kMaxE2eTokens) ||
      !in(o.prefill_step, 1, kMaxE2eTokens)) {
    return Status::InvalidArgument("context, turn and prefill-step tokens must be in [1, " +
                                   std::to_string(kMaxE2eTokens) + "]");
  }
  if (!in(o.workload.output_tokens, 1, kMaxE2eOutputTokens) || o.min_sessions > kMaxE2eSessions ||
      o.blas_threads < 0 || o.blas_threads > 4096) {
    return Status::InvalidArgument("output tokens, min sessions or threads out of range");
  }
  return Status::OK();
}

uint32_t SessionsAt(const E2eOptions& o, uint32_t concurrency) {
  return std::max(concurrency, o.min_sessions);
}

EngineOptions EngineOptionsFor(const Plan& plan, const E2eOptions& o, Store* store, uint64_t pool) {
  EngineOptions e;
  e.model = plan.model;
  e.weights = plan.weights;
  e.pool_bytes = pool;
  e.store = store;
  e.prefill_step_tokens = o.prefill_step;
  e.blas_threads = o.blas_threads;
  return e;
}

Result<std::unique_ptr<Store>> OpenStore(const std::vector<std::string>& tiers) {
  StoreOptions so;
  so.tiers = tiers;
  return Store::Open(so);
}

void Log(std::ostream* log, const std::string& line) {
  if (log != nullptr) *log << line << std::endl;
}

// Turn 1 of every session: prefill its context and save it to file://.
Result<double> Populate(const Plan& plan, const E2eOptions& o, std::ostream* log) {
  const auto t0 = Clock::now();
  auto mode = MakeMode("file", plan.dir, plan.mem_bytes, plan.disk_bytes);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(mode->tiers));
  const uint64_t pool = plan.model.KvLayout().BytesPerChunk() *
                        ((o.workload.context_tokens + plan.model.tokens_per_chunk) / plan.model.tokens_per_chunk);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(EngineOptionsFor(plan, o, store.get(), pool)));
  // One status line, not one line per session (progress/progress.h).
  ProgressReporter progress = ProgressReporter::For(o.progress ? log : nullptr);
  for (uint32_t s = 0; s < plan.max_sessions; ++s) {
    const std::vector<uint32_t> ctx = SessionContext(o.workload, s);
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Request> req, engine->Prefill(s, ctx, 0));
    engine->End(*req);
    engine->EvictIdle();
    progress.Update("  turn 1: session " + std::to_string(s + 1) + "/" + std::to_string(plan.max_sessions) +
                    " prefilled and saved (" +
                    std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 5) +
                    " s)");
  }
  KVTIER_RETURN_IF_ERROR(store->Flush());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Copies every session's context chunks from `src` into `dst`.
Status CopyChunks(const Plan& plan, const E2eOptions& o, uint32_t sessions, Tier& src, Tier& dst) {
  std::vector<std::byte> buf(plan.model.KvLayout().BytesPerChunk());
  const std::span<std::byte> piece(buf);
  const std::span<const std::byte> cpiece(buf);
  for (uint32_t s = 0; s < sessions; ++s) {
    for (const ChunkKey& key : ComputeChunkKeys(plan.ns, SessionContext(o.workload, s))) {
      const ChunkId id = ChunkId::Of(plan.ns, key);
      KVTIER_RETURN_IF_ERROR(src.Get(id, ScatterList(&piece, 1)));
      KVTIER_RETURN_IF_ERROR(dst.Put(id, GatherList(&cpiece, 1)));
    }
  }
  return dst.Flush();
}

// Gives the mode's top tier the saved chunks (file:// already has them).
Status Fill(const Plan& plan, const E2eOptions& o, const ModeSpec& mode, uint32_t sessions, Store& store) {
  if (mode.name == "file") return Status::OK();
  if (mode.name == "mem+file") return CopyChunks(plan, o, sessions, store.tier(1), store.tier(0));
  auto file = MakeMode("file", plan.dir, plan.mem_bytes, plan.disk_bytes);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> src, OpenTier(file->tiers[0]));
  return CopyChunks(plan, o, sessions, *src, store.tier(0));
}

Result<RoundResult> RunMode(const Plan& plan, const E2eOptions& o, const std::string& name,
                           uint32_t concurrency, std::ostream* log) {
  KVTIER_ASSIGN_OR_RETURN(ModeSpec mode, MakeMode(name, plan.dir, plan.mem_bytes, plan.disk_bytes));
  const uint32_t sessions = SessionsAt(o, concurrency);
  std::unique_ptr<Store> store;
  if (!mode.tiers.empty()) {
    KVTIER_ASSIGN_OR_RETURN(store, OpenStore(mode.tiers));
    KVTIER_RETURN_IF_ERROR(Fill(plan, o, mode, sessions, *store));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(EngineOptionsFor(plan, o, store.get(), plan.pool_bytes)));
  const std::string tag = name + " c=" + std::to_string(concurrency);
  // RunRound reports every second; the reporter keeps a log to a line every ~10 s.
  ProgressReporter reporter = ProgressReporter::For(o.progress ? log : nullptr);
  ProgressFn progress;
  if (o.progress && log != nullptr) {
    progress = [&](uint32_t done, uint32_t total) {
      reporter.Update("  " + tag + ": " + std::to_string(done) + "/" + std::to_string(total) + " requests");
    };
  }
  RoundResult round = RunRound(*engine, o.workload, name, sessions, concurrency, progress);
  reporter.Done();
  engine.reset();
  if (store) KVTIER_RETURN_IF_ERROR(store->Flush());
  return round;
}

// Checks each request's greedy answer against recompute's answer for the same session.
void CheckOutputs(const std::map<uint32_t, std::vector<uint32_t>>& reference, const RoundResult& round,
                  RowSummary& row) {
  for (const RequestRecord& r : round.requests) {
    auto it = reference.find(r.session);
    if (it == reference.end()) continue;
    ++row.outputs_checked;
    if (it->second == r.output) ++row.outputs_matched;
  }
}

}  // namespace

Result<E2eReport> RunE2e(const E2eOptions& options, std::ostream* log) {
  KVTIER_RETURN_IF_ERROR(Validate(options));
  KVTIER_ASSIGN_OR_RETURN(ModelConfig model, FindModelConfig(options.model));
  model.seed = options.model_seed;
  KVTIER_RETURN_IF_ERROR(model.Validate());
  E2eOptions o = options;
  o.workload.vocab = model.vocab;
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::Make(model.ModelId(), model.KvLayout(), "default"));

  // file:// and fs:// live in a marked work folder under --dir (default: the temp directory),
  // removed at the end; the next run removes the folder of a run that was killed.
  std::error_code ec;
  const std::string parent =
      o.dir.empty() ? std::filesystem::temp_directory_path(ec).string()
                    : std::filesystem::absolute(o.dir, ec).lexically_normal().string();
  if (ec) return Status::FromErrno(ec.value(), "work directory for " + (o.dir.empty() ? "e2e" : o.dir));
  KVTIER_ASSIGN_OR_RETURN(WorkDir work, WorkDir::Create(parent, "kvtier-e2e"));
  o.dir = work.path();

  const Layout layout = model.KvLayout();
  const uint32_t tpc = layout.tokens_per_chunk;
  uint32_t max_c = *std::max_element(o.concurrency.begin(), o.concurrency.end());
  Plan plan{model, MakeRandomWeights(model), ns, o.dir, SessionsAt(o, max_c), 0, 0, 0};
  const uint64_t per_session = uint64_t{(o.workload.context_tokens + o.workload.turn_tokens +
                                         o.workload.output_tokens + tpc - 1) / tpc} * layout.BytesPerChunk();
  plan.pool_bytes = o.pool_bytes != 0 ? o.pool_bytes : per_session * max_c;
  const uint64_t working = uint64_t{plan.max_sessions} * (o.workload.context_tokens / tpc) * layout.BytesPerChunk();
  plan.mem_bytes = working + working / 4 + (64ull << 20);
  plan.disk_bytes = 2 * working + (1ull << 30);

  E2eReport report;
  report.options = o;
  report.model_id = model.ModelId();
  report.chunk_bytes = layout.BytesPerChunk();
  report.tokens_per_chunk = tpc;
  Log(log, "kvtier bench e2e: model " + model.name + " (" + std::to_string(model.ParameterCount() / 1000000) +
               "M parameters, KV " + layout.ToString() + "), " + std::to_string(o.workload.context_tokens) +
               "-token contexts + " + std::to_string(o.workload.turn_tokens) + "-token turn, " +
               std::to_string(o.workload.output_tokens) + " output tokens, KV pool " +
               FormatBytes(plan.pool_bytes) + ", dir " + o.dir);
  const bool any_tier = std::any_of(o.modes.begin(), o.modes.end(), [](auto& m) { return m != "recompute"; });
  if (any_tier) {
    Log(log, "turn 1: prefill and save " + std::to_string(plan.max_sessions) + " sessions");
    KVTIER_ASSIGN_OR_RETURN(report.populate_s, Populate(plan, o, log));
  }
  std::vector<std::string> modes = o.modes;
  std::stable_partition(modes.begin(), modes.end(), [](auto& m) { return m == "recompute"; });
  for (uint32_t c : o.concurrency) {
    std::map<uint32_t, std::vector<uint32_t>> reference;  // session -> recompute's answer
    double recompute_p50 = 0;
    for (const std::string& m : modes) {
      Log(log, "returning sessions: " + m + ", concurrency " + std::to_string(c));
      KVTIER_ASSIGN_OR_RETURN(RoundResult round, RunMode(plan, o, m, c, log));
      RowSummary row = Summarize(round);
      if (m == "recompute") {
        for (const RequestRecord& r : round.requests) reference[r.session] = r.output;
        recompute_p50 = row.ttft_p50_ms;
      } else {
        CheckOutputs(reference, round, row);
      }
      if (recompute_p50 > 0 && row.ttft_p50_ms > 0) row.speedup_p50 = recompute_p50 / row.ttft_p50_ms;
      report.outputs_checked += row.outputs_checked;
      report.outputs_matched += row.outputs_matched;
      Log(log, "  " + m + " c=" + std::to_string(c) + ": TTFT p50 " + std::to_string(row.ttft_p50_ms) +
                   " ms" + (row.error.empty() ? "" : ", error: " + row.error));
      report.rows.push_back(std::move(row));
    }
  }
  return report;
}

}  // namespace kvtier::internal
