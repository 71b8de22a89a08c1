// `kvtier bench save`: how fast a Store absorbs new KV, fed the way an engine feeds it after each
// prefill, next to fio's O_DIRECT sequential writes of the same disk measured in the same run.
//
// A run opens one Store (default tiers: mem://?capacity=M over file://WORK/tier or fs://WORK/tier, WORK a
// work folder under the --target directory; or the --tier URLs) and touches its memory tier once. A
// step starts `feeders` threads that
// each issue Store::Save calls of one whole prefix of fresh chunks (distinct keys; `context_tokens`
// tokens of the model's layout) on a fixed schedule that offers the step's target rate together, for
// `step_seconds`; a sampler reads StoreStats every `sample_seconds` (the background queue's bytes and
// jobs). Then Flush. The step reports the rate offered (bytes given to Save / feed time), the rate
// absorbed (payload bytes the lowest tier took / time until Flush returned), StoreStats::dropped_saves,
// the queue samples and each Save call's latency as its caller saw it (p50/p99/max). The step's chunks
// are then removed from the Store, so the next step starts from an empty queue and an empty disk tier.
// The steps follow the search of eval/benchlib/save_search.h.
//
// The start rate: the model's KV bytes per token x the tokens per second of a prefill of
// `context_tokens` on `gpu` (eval/gpuprofile) x `gpus`, or an explicit `rate`.
//
// The highest drop-free rate holds for a step of `step_seconds`: a burst above the disk's speed is
// absorbed by the queue until it is full, so a step may pass at up to queue_bytes / step_seconds above
// what the disk sustains. Longer steps (or a smaller queue) tighten it; the output says so.
//
// Thread-compatible: run one bench at a time per target directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/benchlib/fio_runner.h"
#include "eval/benchlib/save_search.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "io/chunk_io.h"
#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/store.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

class ProgressReporter;

inline constexpr const char* kSaveSchema = "kvtier.bench.save/1";

// The command line as text, before any of it is checked (MakeSaveBenchConfig checks it).
struct SaveBenchArgs {
  std::string target;               // file://DIR or fs://DIR: the work folder and fio's files
  std::vector<std::string> tiers;   // --tier, repeatable: the Store's tiers instead of the default
  std::string model = "llama-3.1-8b";
  uint32_t chunk_tokens = 0;        // 0: the preset's
  std::string gpu = "h200";
  uint32_t gpus = 1;
  std::string rate;                 // e.g. "2GB/s"; empty: from the model and the GPU
  uint64_t context_tokens = 32768;
  double seconds = 5, max_seconds = 120;
  uint32_t bisections = 3;
  std::string mem;                  // mem:// capacity; empty: queue + 2 prefixes
  std::string queue_bytes = "1GiB";
  uint32_t queue_chunks = 4096, background_threads = StoreOptions{}.background_threads, feeders = 0;  // feeders 0: one per GPU
  bool no_fio = false, keep = false;
  std::string fio_bytes = "4GiB";
  uint32_t fio_depth = 8;
};

struct SaveBenchConfig {
  std::string target;               // as given
  std::string target_dir;           // its directory
  std::string target_scheme;        // "file" or "fs"
  std::vector<std::string> tiers;   // empty: mem:// over the target's scheme in the work folder
  ModelPreset model;
  std::optional<GpuProfile> gpu;
  uint32_t gpus = 1;
  std::optional<double> rate;       // bytes/s, explicit
  uint64_t context_tokens = 32768;  // tokens per Save call (whole chunks of them)
  double step_seconds = 5, max_seconds = 120, sample_seconds = 0.1;
  uint32_t bisections = 3;
  uint64_t mem_bytes = 0;           // 0: queue_bytes + 2 prefixes
  uint64_t queue_bytes = 1ull << 30;
  uint32_t queue_chunks = 4096, background_threads = StoreOptions{}.background_threads, feeders = 1;
  bool run_fio = true, keep_files = false;
  uint64_t fio_bytes = 4ull << 30;
  uint32_t fio_depth = 8;
  ProgressReporter* progress = nullptr;  // may be null
};

// Parses a rate: a positive decimal number and a unit, "/s" optional: B, KB, MB, GB, TB (powers of
// 1000) or KiB, MiB, GiB, TiB; "2GB/s", "750MiB/s", "1.5GB". InvalidArgument otherwise (no unit,
// zero, negative, not finite, above 1 PB/s).
Result<double> ParseRate(const std::string& text);

// Checks and converts the command line: InvalidArgument naming the flag for a missing or
// non-directory --target, an unknown model or GPU, a bad rate or size, a tier URL that does not parse.
Result<SaveBenchConfig> MakeSaveBenchConfig(const SaveBenchArgs& args);

// What the feed will be, worked out before anything runs.
struct SavePlan {
  uint64_t chunk_bytes = 0, chunks_per_save = 0, prefix_bytes = 0;
  double prefill_seconds = 0;   // of context_tokens on the GPU (0 without one)
  double model_rate = 0;        // bytes/s the GPUs make: bytes per token x tokens/s x gpus (0 without)
  double start_rate = 0;        // rate, or model_rate
  uint64_t mem_bytes = 0;       // the mem:// tier's capacity
};

// InvalidArgument when neither a rate nor a GPU gives a start rate, or context_tokens is less than a chunk.
Result<SavePlan> PlanSave(const SaveBenchConfig& config);

// The default tiers of a run whose work folder is `work_dir`.
std::vector<std::string> DefaultSaveTiers(const SaveBenchConfig& config, const SavePlan& plan,
                                          const std::string& work_dir);

struct QueueSample {
  double t = 0;  // seconds since the step started
  uint64_t bytes = 0, chunks = 0;
};

// One step, as measured.
struct SaveStep {
  double target_rate = 0, offered_rate = 0, absorbed_rate = 0;  // bytes/s
  uint64_t saves = 0, chunks = 0, bytes_offered = 0, bytes_absorbed = 0;
  uint64_t dropped = 0, errors = 0;
  double feed_seconds = 0, flush_seconds = 0;
  LatencySummary save_latency;  // per Save call, as its caller saw it (exact, not bucketed)
  std::vector<QueueSample> queue;
  uint64_t queue_max_bytes = 0;
  bool passed = false;
  SaveStepOutcome Outcome() const;
};

// The latency summary of `micros` (sorted in place): nearest-rank p50, p90, p99 and the max.
LatencySummary SummarizeLatencies(std::vector<double>& micros);

struct SaveBenchResult {
  std::string started_at, host;
  SaveBenchConfig config;
  SavePlan plan;
  std::vector<std::string> tiers;
  std::vector<SaveStep> steps;
  std::optional<size_t> best;  // into steps
  std::string stop_reason;
  std::optional<FioResult> fio_write;
  std::string fio_note;  // why there is no fio figure, when there is none
  double HighestDropFreeRate() const { return best ? steps[*best].offered_rate : 0; }
  // The best step's absorbed rate: its bytes reached the lowest tier over its time including the Flush
  // that drained the queue, so no burst hidden in the queue counts.
  double BestAbsorbedRate() const { return best ? steps[*best].absorbed_rate : 0; }
  double AbsorbedRatioToFio() const {
    return best && fio_write && fio_write->bytes_per_second > 0 ? BestAbsorbedRate() / fio_write->bytes_per_second
                                                                : 0;
  }
  double RatioToFio() const {
    return best && fio_write && fio_write->bytes_per_second > 0 ? HighestDropFreeRate() / fio_write->bytes_per_second
                                                                : 0;
  }
};

// What every save of a run gathers: one chunk of generated bytes (4 KiB aligned, as an engine's KV
// pages are) and the bench's namespace. Movable.
class SaveSource {
 public:
  static Result<SaveSource> Create(const SaveBenchConfig& config, const SavePlan& plan);
  GatherList Gather() const { return {piece_, 1}; }
  const Namespace* ns() const { return &*ns_; }

 private:
  AlignedBuffer buffer_;
  std::span<const std::byte> piece_[1];
  std::optional<Namespace> ns_;
};

// The Store of a run: `tiers`, the config's queue bounds and background threads, no promotion.
Result<std::unique_ptr<Store>> OpenSaveStore(const SaveBenchConfig& config, const std::vector<std::string>& tiers);

// Touches the memory of an in-memory top tier once (fills it with chunks and removes them), as a running
// engine's store has touched it, so the first step does not pay the first page faults of the arena.
Status WarmTopTier(Store& store, const SaveSource& src, const SavePlan& plan);

// Measures one step at `target_rate` on `store` (one Store serves every step of a run; the step's
// figures are differences of StoreStats, and its chunks are removed at the end). Keys never repeat.
Result<SaveStep> RunSaveStep(const SaveBenchConfig& config, const SavePlan& plan, Store& store, const SaveSource& src,
                             double target_rate, uint64_t step_index);

// The whole bench: the search, then fio. Fails before the first step when the target is not a
// directory, has no room for fio's files, or the host lacks memory for the mem:// tier.
Result<SaveBenchResult> RunSaveBench(const SaveBenchConfig& config);

nlohmann::json ToJson(const SaveBenchResult& r);
std::string FormatSummary(const SaveBenchResult& r);

}  // namespace kvtier::internal
