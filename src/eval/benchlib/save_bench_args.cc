// `kvtier bench save`: the command line checked and turned into a config and a plan.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "eval/benchlib/save_bench.h"

namespace kvtier::internal {
namespace {

constexpr double kMinRate = 1e6;    // 1 MB/s: below this a step moves too little to say anything
constexpr double kMaxRate = 1e15;   // 1 PB/s
constexpr uint64_t kMaxBytes = 1ull << 50;

Result<uint64_t> SizeFlag(const std::string& flag, const std::string& text, uint64_t min) {
  auto v = ParseSize(text);
  if (!v.ok() || *v < min || *v > kMaxBytes) {
    return Status::InvalidArgument(flag + " '" + text + "' is not a size from " + FormatBytes(min) + " to " +
                                   FormatBytes(kMaxBytes) + " (e.g. 4GiB)");
  }
  return *v;
}

Status CheckTarget(const std::string& target, SaveBenchConfig* c) {
  if (target.empty()) {
    return Status::InvalidArgument("--target is required: file://DIR or fs://DIR on the disk to measure "
                                   "(the work folder and fio's reference files go there)");
  }
  KVTIER_ASSIGN_OR_RETURN(TierUrl url, TierUrl::Parse(target));
  if (url.scheme != "file" && url.scheme != "fs") {
    return Status::InvalidArgument("--target " + target + " is not a file:// or fs:// directory URL");
  }
  if (url.path.empty()) return Status::InvalidArgument("--target " + target + " has no directory");
  if (!url.params.empty()) {
    return Status::InvalidArgument("--target " + target + " takes no options; pass the Store's tiers with --tier");
  }
  struct stat st;
  if (::lstat(url.path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("--target " + url.path + " exists and is not a directory");
  }
  c->target = target;
  c->target_dir = url.path;
  c->target_scheme = url.scheme;
  return Status::OK();
}

}  // namespace

Result<double> ParseRate(const std::string& text) {
  std::string s = text;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "/s") == 0) s.resize(s.size() - 2);
  auto bytes = ParseSize(s);
  if (!bytes.ok() || s.find_first_not_of("0123456789. ") == std::string::npos) {
    return Status::InvalidArgument("rate '" + text + "' is not a number with a unit, e.g. 2GB/s or 750MiB/s");
  }
  const double rate = static_cast<double>(*bytes);
  if (rate < kMinRate || rate > kMaxRate) {
    return Status::InvalidArgument("rate '" + text + "' is outside 1 MB/s to 1 PB/s");
  }
  return rate;
}

Result<SaveBenchConfig> MakeSaveBenchConfig(const SaveBenchArgs& a) {
  SaveBenchConfig c;
  KVTIER_RETURN_IF_ERROR(CheckTarget(a.target, &c));
  for (const std::string& t : a.tiers) {
    auto url = TierUrl::Parse(t);
    if (!url.ok()) return Status::InvalidArgument("--tier " + t + ": " + url.status().message());
  }
  c.tiers = a.tiers;
  KVTIER_ASSIGN_OR_RETURN(c.model, FindModelPreset(a.model));
  if (a.chunk_tokens) c.model.layout.tokens_per_chunk = a.chunk_tokens;
  KVTIER_RETURN_IF_ERROR(c.model.layout.Validate());
  KVTIER_ASSIGN_OR_RETURN(c.gpu, FindGpuProfile(a.gpu));
  if (a.gpus < 1 || a.gpus > 4096) return Status::InvalidArgument("--gpus must be 1 to 4096");
  c.gpus = a.gpus;
  if (!a.rate.empty()) {
    KVTIER_ASSIGN_OR_RETURN(c.rate, ParseRate(a.rate));
  }
  c.context_tokens = a.context_tokens;
  if (!std::isfinite(a.seconds) || a.seconds <= 0 || a.seconds > 3600) {
    return Status::InvalidArgument("--seconds must be above 0 and at most 3600");
  }
  if (!std::isfinite(a.max_seconds) || a.max_seconds < a.seconds || a.max_seconds > 86400) {
    return Status::InvalidArgument("--max-seconds must be at least --seconds and at most 86400");
  }
  c.step_seconds = a.seconds;
  c.max_seconds = a.max_seconds;
  c.bisections = a.bisections;
  if (!a.mem.empty()) {
    KVTIER_ASSIGN_OR_RETURN(c.mem_bytes, SizeFlag("--mem", a.mem, 1 << 20));
  }
  KVTIER_ASSIGN_OR_RETURN(c.queue_bytes, SizeFlag("--queue-bytes", a.queue_bytes, 1 << 20));
  c.queue_chunks = a.queue_chunks;
  c.background_threads = a.background_threads;
  c.feeders = a.feeders ? a.feeders : std::min<uint32_t>(a.gpus, 64);
  c.run_fio = !a.no_fio;
  c.keep_files = a.keep;
  KVTIER_ASSIGN_OR_RETURN(c.fio_bytes, SizeFlag("--fio-bytes", a.fio_bytes, 1 << 20));
  c.fio_depth = a.fio_depth;
  if (c.queue_chunks < 1 || c.background_threads < 1 || c.fio_depth < 1 || c.feeders > 256) {
    return Status::InvalidArgument("--queue-chunks, --background-threads and --fio-depth must be at least 1, "
                                   "--feeders at most 256");
  }
  return c;
}

Result<SavePlan> PlanSave(const SaveBenchConfig& c) {
  KVTIER_RETURN_IF_ERROR(c.model.layout.Validate());
  SavePlan p;
  p.chunk_bytes = c.model.layout.BytesPerChunk();
  p.chunks_per_save = c.context_tokens / c.model.layout.tokens_per_chunk;
  if (p.chunks_per_save == 0) {
    return Status::InvalidArgument("--context-tokens " + std::to_string(c.context_tokens) +
                                   " is less than one chunk of " +
                                   std::to_string(c.model.layout.tokens_per_chunk) + " tokens");
  }
  p.prefix_bytes = p.chunks_per_save * p.chunk_bytes;
  if (c.gpu) {
    p.prefill_seconds = RecomputeSeconds(c.model, *c.gpu, c.context_tokens);
    if (p.prefill_seconds > 0) {
      p.model_rate = static_cast<double>(c.model.layout.BytesPerToken()) *
                     (static_cast<double>(c.context_tokens) / p.prefill_seconds) * c.gpus;
    }
  }
  p.start_rate = c.rate ? *c.rate : p.model_rate;
  if (!(p.start_rate > 0)) return Status::InvalidArgument("no start rate: give --rate or a --gpu profile");
  p.mem_bytes = c.mem_bytes ? c.mem_bytes : c.queue_bytes + 2 * p.prefix_bytes;
  if (p.mem_bytes < p.prefix_bytes) {
    return Status::InvalidArgument("--mem " + FormatBytes(p.mem_bytes) + " holds less than one save of " +
                                   FormatBytes(p.prefix_bytes) + " (lower --context-tokens or raise --mem)");
  }
  return p;
}

std::vector<std::string> DefaultSaveTiers(const SaveBenchConfig& c, const SavePlan& p, const std::string& work_dir) {
  if (!c.tiers.empty()) return c.tiers;
  TierUrl mem{"mem", "", {{"capacity", std::to_string(p.mem_bytes)}}};
  TierUrl disk{c.target_scheme, work_dir + "/tier", {}};
  return {mem.ToString(), disk.ToString()};
}

}  // namespace kvtier::internal
