// `kvtier bench ttft`: TTFT of returning multi-turn sessions per mode and concurrency, with the KV loaded
// for real through the Store and the GPU's prefill modelled from a profile (src/eval/ttft/run.h).
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "eval/benchlib/datapath_io.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "kvtier/tier.h"
#include "progress/progress.h"
#include "tools/cli_numbers.h"
#include "core/host_identity.h"
#include "core/output_file.h"
#include "tools/command.h"
#include "eval/ttft/results.h"
#include "eval/ttft/run.h"

namespace kvtier::tools {
namespace {

constexpr uint64_t kMaxConcurrency = 1024;

struct TtftArgs {
  std::string model = "llama-3.1-8b";
  std::string gpu = "h200";
  uint32_t chunk_tokens = 0;
  uint64_t context = 8192;
  uint32_t turn_tokens = 256;
  uint32_t turns = 3;
  uint32_t min_sessions = 4;
  uint32_t load_batch = 16;
  std::string concurrency = "1,4,8";
  std::string modes = "recompute,mem,file,fs,mem+file";
  std::string json;
  std::string dir;
  bool quiet = false;
};

Result<std::vector<uint32_t>> ParseLevels(const std::string& text) {
  std::vector<uint32_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const auto n = ParseWholeNumber(item, 1, kMaxConcurrency);
    if (!n) {
      return Status::InvalidArgument("--concurrency '" + item + "' is not a whole number in [1, " +
                                     std::to_string(kMaxConcurrency) + "]");
    }
    out.push_back(static_cast<uint32_t>(*n));
  }
  return out;
}

std::vector<std::string> ParseModes(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Result<internal::TtftOptions> MakeOptions(const TtftArgs& a) {
  internal::TtftOptions o;
  KVTIER_ASSIGN_OR_RETURN(o.model, FindModelPreset(a.model));
  if (a.chunk_tokens) o.model.layout.tokens_per_chunk = a.chunk_tokens;
  KVTIER_ASSIGN_OR_RETURN(o.gpu, internal::FindGpuProfile(a.gpu));
  o.context_tokens = a.context;
  o.turn_tokens = a.turn_tokens;
  o.turns = a.turns;
  o.min_sessions = a.min_sessions;
  o.load_batch_chunks = a.load_batch;
  KVTIER_ASSIGN_OR_RETURN(o.concurrency, ParseLevels(a.concurrency));
  o.modes = ParseModes(a.modes);
  o.dir = a.dir;
  KVTIER_RETURN_IF_ERROR(internal::ValidateTtft(o));
  return o;
}

int RunTtft(const TtftArgs& a) {
  auto o = MakeOptions(a);
  if (!o.ok()) {
    std::cerr << "kvtier bench ttft: " << o.status().ToString() << "\n";
    return 2;
  }
  const std::string started = internal::UtcNow();
  internal::ProgressReporter progress = internal::ProgressReporter::For(a.quiet ? nullptr : &std::cerr);
  progress.Note("kvtier bench ttft: " + internal::ComputeModelNote(*o));
  auto points = internal::RunTtft(*o, &progress);
  progress.Done();
  if (!points.ok()) {
    std::cerr << "kvtier bench ttft: " << points.status().ToString() << "\n";
    return points.status().code() == Code::kNoSpace ? 3 : 1;
  }
  const auto rows = internal::SummarizeTtft(*o, *points);
  std::cout << internal::FormatTtftTable(*o, rows);
  if (!a.json.empty()) {
    const Status written = internal::WriteOutputFile(a.json, internal::TtftJson(*o, rows, started, internal::HostName()).dump(2) + "\n", "results");
    if (!written.ok()) {
      std::cerr << "kvtier bench ttft: " << written.ToString() << "\n";
      return 1;
    }
    std::cerr << "results written to " << a.json << "\n";
  }
  return 0;
}

KVTIER_COMMAND(
    "bench", "ttft",
    "TTFT of returning sessions: real Store loads, prefill compute modelled from a GPU profile",
    [](CLI::App& cmd) -> std::function<int()> {
      auto a = std::make_shared<TtftArgs>();
      cmd.add_option("--model", a->model, "model preset (KV layout and FLOPs)")->capture_default_str();
      cmd.add_option("--gpu", a->gpu, "GPU profile the compute is modelled from: " + internal::GpuProfileNames(/*kinds=*/true))
          ->capture_default_str();
      cmd.add_option("--chunk-tokens", a->chunk_tokens, "tokens per chunk (default: the preset's 256)")
          ->check(WholeNumber(1, 1u << 20));
      cmd.add_option("--context", a->context, "saved context tokens at the first returning turn")
          ->capture_default_str()
          ->check(WholeNumber(1, 1ull << 24));
      cmd.add_option("--turn-tokens", a->turn_tokens, "new tokens per returning turn")
          ->capture_default_str()
          ->check(WholeNumber(1, 1u << 20));
      cmd.add_option("--turns", a->turns, "returning turns per session")
          ->capture_default_str()
          ->check(WholeNumber(1, 1000));
      cmd.add_option("--min-sessions", a->min_sessions, "sessions per level: max(concurrency, this)")
          ->capture_default_str()
          ->check(WholeNumber(1, 100000));
      cmd.add_option("--load-batch", a->load_batch, "chunks per Store::Load call (a client's buffer)")
          ->capture_default_str()
          ->check(WholeNumber(1, 4096));
      cmd.add_option("--concurrency", a->concurrency, "comma-separated client counts")->capture_default_str();
      cmd.add_option("--modes", a->modes, "modes to run")->capture_default_str();
      cmd.add_option("--json", a->json, "write the results (schema kvtier.bench.ttft/1) here");
      cmd.add_option("--dir", a->dir, "parent of the run's work folder for file:// and fs:// (default: $TMPDIR or /tmp)");
      cmd.add_flag("--quiet", a->quiet, "no progress lines");
      return [a] { return RunTtft(*a); };
    });

}  // namespace
}  // namespace kvtier::tools
