// `kvtier replay`: the capacity planner. Replays a request trace (JSONL: timestamp, input_length,
// output_length, hash_ids) through the real Store and reports the prefix hit ratio, bytes per tier,
// the bandwidth the hits need and an estimate of the prefill compute saved; `--sweep` draws hit
// ratio against capacity. The work is in src/eval/replay; this file only parses options.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "eval/gpuprofile/gpu_profile.h"
#include "eval/replay/plot.h"
#include "eval/replay/report.h"
#include "eval/replay/trace.h"
#include "tools/cli_numbers.h"
#include "core/output_file.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

using namespace kvtier::internal;

struct ReplayArgs {
  std::string trace;
  uint32_t block_tokens = 512;
  std::string model;
  std::vector<std::string> tiers;
  std::string capacity_tokens;
  std::string json_path;
  std::vector<std::string> sweep;
  std::string plot_path;
  std::string admission = "auto";
  std::vector<std::string> gpus;
  uint32_t bytes_per_token = 2;
  size_t max_requests = 0;
  std::optional<double> reference_ratio;
  std::string reference_label = "reference";
};

class Stopwatch {
 public:
  // Seconds since construction or the previous Lap.
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

int Fail(const Status& s) {
  std::cerr << "kvtier replay: " << s.ToString() << "\n";
  return 1;
}

Result<std::vector<Admission>> Policies(const std::string& name,
                                        const std::vector<ReplayTier>& tiers) {
  if (name == "always") return std::vector<Admission>{Admission::kAlways};
  if (name == "second-use") return std::vector<Admission>{Admission::kSecondUse};
  if (name == "both") return std::vector<Admission>{Admission::kAlways, Admission::kSecondUse};
  if (name == "auto") {
    // Admission decides what the Store writes to tiers outside memory (in the background); without
    // such a lower tier both policies behave alike.
    for (size_t i = 1; i < tiers.size(); ++i) {
      if (tiers[i].parsed.scheme != "mem") {
        return std::vector<Admission>{Admission::kAlways, Admission::kSecondUse};
      }
    }
    return std::vector<Admission>{Admission::kAlways};
  }
  return Status::InvalidArgument("--admission must be always, second-use, both or auto");
}

Result<std::vector<ReplayTier>> Tiers(const ReplayArgs& a, const ReplayScale& scale) {
  std::vector<std::string> urls = a.tiers;
  if (!a.capacity_tokens.empty()) {
    if (!urls.empty()) {
      return Status::InvalidArgument("give --capacity-tokens or --tiers, not both");
    }
    urls.push_back("mem://?capacity=" + a.capacity_tokens + "tokens");
  }
  if (urls.empty()) urls.push_back("mem://");  // unlimited
  std::vector<ReplayTier> out;
  for (const std::string& u : urls) {
    KVTIER_ASSIGN_OR_RETURN(ReplayTier t, ParseReplayTier(u, scale));
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<GpuProfile>> Gpus(const std::vector<std::string>& names) {
  std::vector<GpuProfile> out;
  if (names.empty()) {
    for (const GpuProfile& g : GpuProfiles()) out.push_back(g);
    return out;
  }
  for (const std::string& n : names) {
    KVTIER_ASSIGN_OR_RETURN(GpuProfile g, FindGpuProfile(n));
    out.push_back(std::move(g));
  }
  return out;
}

Status RunSweep(const ReplayArgs& a, const Replayer& replayer, const std::vector<ReplayTier>& tiers,
                const ReplayOptions& base, ReplayReport* report) {
  report->sweep_tier = tiers.back().url;
  for (const std::string& text : a.sweep) {
    KVTIER_ASSIGN_OR_RETURN(const uint64_t tokens, ParseTokenCount(text));
    if (tokens == 0) return Status::InvalidArgument("--sweep capacities must be positive");
    ReplayOptions opt = base;
    KVTIER_ASSIGN_OR_RETURN(opt.tiers.back(),
                            WithCapacityTokens(tiers.back(), tokens, report->scale));
    KVTIER_ASSIGN_OR_RETURN(ReplayRun run, replayer.Run(opt));
    report->sweep.push_back(ReplaySweepPoint{tokens, std::move(run)});
  }
  return Status::OK();
}

Status WriteOutputs(const ReplayArgs& a, const ReplayReport& report) {
  std::cout << ReportText(report);
  nlohmann::json j = ReportJson(report);
  if (!report.sweep.empty()) {
    PlotOptions po;
    po.svg_path = !a.plot_path.empty() ? a.plot_path
                  : !a.json_path.empty()
                      ? std::filesystem::path(a.json_path).replace_extension(".svg").string()
                      : "kvtier-replay-sweep.svg";
    po.reference_ratio = a.reference_ratio;
    po.reference_label = a.reference_label;
    Status s = WriteSweepPlot(report, po);
    j["sweep"]["plot"] = s.ok() ? nlohmann::json(po.svg_path) : nlohmann::json(nullptr);
    if (s.ok()) {
      std::cout << "plot: " << po.svg_path << "\n";
    } else {
      std::cerr << "kvtier replay: no plot: " << s.ToString() << "\n";
    }
  }
  if (!a.json_path.empty()) {
    KVTIER_RETURN_IF_ERROR(internal::WriteOutputFile(a.json_path, j.dump(2) + "\n", "results"));
    std::cout << "json: " << a.json_path << "\n";
  }
  return Status::OK();
}

int RunReplay(const ReplayArgs& a) {
  ReplayReport report;
  report.trace_path = a.trace;
  auto model = FindModelPreset(a.model);
  if (!model.ok()) return Fail(model.status());
  report.model = *model;
  report.scale = ReplayScale{a.block_tokens, a.bytes_per_token, model->layout.BytesPerToken(),
                             model->layout.StateBytes()};
  auto gpus = Gpus(a.gpus);
  if (!gpus.ok()) return Fail(gpus.status());
  report.gpus = *gpus;
  auto tiers = Tiers(a, report.scale);
  if (!tiers.ok()) return Fail(tiers.status());
  auto policies = Policies(a.admission, *tiers);
  if (!policies.ok()) return Fail(policies.status());
  Stopwatch watch;
  auto trace = LoadTrace(a.trace, a.block_tokens, a.max_requests);
  if (!trace.ok()) return Fail(trace.status());
  report.timings.load_trace_s = watch.Lap();
  report.trace = &*trace;
  report.summary = SummarizeTrace(*trace);
  report.timings.summarize_s = watch.Lap();
  auto replayer = Replayer::Make(*trace, report.scale, model->model_id);
  if (!replayer.ok()) return Fail(replayer.status());
  report.timings.derive_keys_s = watch.Lap();

  ReplayOptions opt;
  opt.tiers = *tiers;
  opt.unlimited_blocks = report.summary.unique_blocks;
  for (Admission adm : *policies) {
    opt.admission = adm;
    auto run = (*replayer)->Run(opt);
    if (!run.ok()) return Fail(run.status());
    report.runs.push_back(std::move(run).value());
  }
  opt.admission = policies->front();
  if (!a.sweep.empty()) {
    Status s = RunSweep(a, **replayer, *tiers, opt, &report);
    if (!s.ok()) return Fail(s);
  }
  Status s = WriteOutputs(a, report);
  if (!s.ok()) return Fail(s);
  uint64_t wrong = 0;
  for (const ReplayRun& r : report.runs) wrong += r.wrong_blocks;
  for (const ReplaySweepPoint& p : report.sweep) wrong += p.run.wrong_blocks;
  if (wrong > 0) {
    std::cerr << "kvtier replay: " << wrong << " loaded blocks held the wrong bytes\n";
    return 3;
  }
  return 0;
}

KVTIER_COMMAND(
    "", "replay",
    "Replay a request trace through the Store: hit ratio, bytes and bandwidth per tier",
    [](CLI::App& cmd) -> std::function<int()> {
      auto a = std::make_shared<ReplayArgs>();
      cmd.add_option("--trace", a->trace, "JSONL trace: timestamp, input_length, hash_ids per line")
          ->required();
      cmd.add_option("--block-tokens", a->block_tokens, "tokens per hash id block")
          ->default_val(512)
          ->check(WholeNumber(1, kMaxBlockTokens));
      cmd.add_option("--model", a->model, "model preset the byte figures are scaled to")
          ->required();
      cmd.add_option("--tiers", a->tiers,
                     "tier URLs, fastest first; capacity=<N>tokens or a size of model KV bytes; no "
                     "capacity means unlimited (default: one unlimited mem://)")
          ->delimiter(',');
      cmd.add_option("--capacity-tokens", a->capacity_tokens, "capacity of a single mem:// tier");
      cmd.add_option("--json", a->json_path, "write the results as JSON");
      cmd.add_option("--sweep", a->sweep,
                     "capacities (tokens) of the last tier to replay, e.g. 1M,4M")
          ->delimiter(',');
      cmd.add_option("--plot", a->plot_path, "SVG of the sweep (default: the --json path, .svg)");
      cmd.add_option(
          "--admission", a->admission,
          "always (LRU), second-use, both, or auto (both when a lower tier is not in memory)");
      cmd.add_option("--gpu", a->gpus, "GPU profiles for the prefill estimate (default: all)")
          ->delimiter(',');
      cmd.add_option("--replay-bytes-per-token", a->bytes_per_token,
                     "scaled payload bytes per token (even)")
          ->default_val(2)
          ->check(WholeNumber(2, 1u << 16));
      cmd.add_option("--max-requests", a->max_requests, "replay only the first N requests")
          ->check(WholeNumber(0, 1ull << 40));
      cmd.add_option("--reference-ratio", a->reference_ratio,
                     "draw a published hit ratio on the plot for comparison")
          ->check(FiniteNumber(0, 1));
      cmd.add_option("--reference-label", a->reference_label, "label of --reference-ratio");
      return [a] { return RunReplay(*a); };
    });

}  // namespace
}  // namespace kvtier::tools
