// `kvtier bench datapath`: storage qualification of one target, next to fio in the same run.
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "eval/benchlib/datapath.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "eval/benchlib/results.h"
#include "kvtier/tier.h"
#include "tools/cli_numbers.h"
#include "core/output_file.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct DatapathArgs {
  std::string target;
  std::string model = "llama-3.1-8b";
  uint32_t chunk_tokens = 0;
  std::string total = "4GiB";
  std::string inflight;
  std::string json;
  std::string gpu = "h100";
  std::optional<double> mfu, peak_tflops;
  uint64_t context_tokens = 32768;
  uint32_t repeat = 1;
  bool no_fio = false, no_serial = false, no_encrypted = false, keep = false;
};

// Far above any run, and low enough that the plan's byte sums cannot overflow.
constexpr uint64_t kMaxTotal = 1ull << 50;     // 1 PiB
constexpr uint64_t kMaxInflight = 1ull << 40;  // 1 TiB

Result<std::vector<uint64_t>> ParseSizeList(const std::string& text) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    KVTIER_ASSIGN_OR_RETURN(uint64_t v, ParseSize(item));
    if (v > kMaxInflight) {
      return Status::InvalidArgument("--inflight " + item + " is above the limit of " + FormatBytes(kMaxInflight));
    }
    out.push_back(v);
  }
  return out;
}

Result<internal::DatapathConfig> MakeConfig(const DatapathArgs& a) {
  internal::DatapathConfig c;
  c.target = a.target;
  KVTIER_ASSIGN_OR_RETURN(c.model, FindModelPreset(a.model));
  if (a.chunk_tokens) c.model.layout.tokens_per_chunk = a.chunk_tokens;
  KVTIER_ASSIGN_OR_RETURN(c.total_bytes, ParseSize(a.total));
  if (c.total_bytes > kMaxTotal) {
    return Status::InvalidArgument("--total " + a.total + " is above the limit of " + FormatBytes(kMaxTotal));
  }
  KVTIER_ASSIGN_OR_RETURN(c.inflight, ParseSizeList(a.inflight));
  KVTIER_ASSIGN_OR_RETURN(c.gpu, internal::FindGpuProfile(a.gpu, a.mfu, a.peak_tflops));
  c.context_tokens = a.context_tokens;
  c.repeat = a.repeat;
  c.run_fio = !a.no_fio;
  c.run_serial = !a.no_serial;
  c.run_encrypted = !a.no_encrypted;
  c.keep_files = a.keep;
  c.progress = [](const std::string& line) { std::cerr << line << std::endl; };
  return c;
}

int RunDatapath(const DatapathArgs& a) {
  auto config = MakeConfig(a);
  if (!config.ok()) {
    std::cerr << "kvtier bench datapath: " << config.status().ToString() << "\n";
    return 2;
  }
  auto result = internal::RunDatapath(*config);
  if (!result.ok()) {
    std::cerr << "kvtier bench datapath: " << result.status().ToString() << "\n";
    return 1;
  }
  std::cout << internal::FormatSummary(*result);
  if (!a.json.empty()) {
    const Status written = internal::WriteOutputFile(a.json, internal::ToJson(*result).dump(2) + "\n", "results");
    if (!written.ok()) {
      std::cerr << "kvtier bench datapath: " << written.ToString() << "\n";
      return 1;
    }
    std::cerr << "results written to " << a.json << "\n";
  }
  uint64_t errors = 0, wrong = 0;
  for (const auto& p : result->sweep) {
    errors += p.kvtier.errors;
    wrong += p.kvtier.wrong_bytes;
  }
  if (errors) {
    std::cerr << "kvtier bench datapath: " << internal::DatapathErrorLine(errors, wrong) << "\n";
    return 1;
  }
  return 0;
}

KVTIER_COMMAND(
    "bench", "datapath",
    "write model-sized chunks to a tier, read them back cold, next to fio and a serial baseline",
    [](CLI::App& cmd) -> std::function<int()> {
      auto a = std::make_shared<DatapathArgs>();
      cmd.add_option("--target", a->target, "tier URL, e.g. file:///nvme/kv or mem://")->required();
      cmd.add_option("--model", a->model, "model preset fixing the chunk layout (any of `kvtier models`)")->capture_default_str();
      cmd.add_option("--chunk-tokens", a->chunk_tokens, "tokens per chunk (default: the preset's 256)")
          ->check(WholeNumber(1, 1u << 20));
      cmd.add_option("--total", a->total, "bytes written and read back per pass")->capture_default_str();
      cmd.add_option("--inflight", a->inflight,
                     "comma-separated bytes in flight to sweep (default: 1,2,4,8,16 chunks; object tiers: whole objects, "
                     "the 4 KiB chunk header included)");
      cmd.add_option("--json", a->json, "write the results (schema kvtier.bench.datapath/1) here");
      cmd.add_option("--gpu", a->gpu, "GPU profile for the recompute estimate: " + internal::GpuProfileNames())
          ->capture_default_str();
      cmd.add_option("--mfu", a->mfu, "override the profile's model-FLOPs utilisation (0-1]")
          ->check(FiniteNumber(0, 1));
      cmd.add_option("--peak-tflops", a->peak_tflops, "override the profile's dense bf16 TFLOP/s")
          ->check(FiniteNumber(0.001, 1e9));
      cmd.add_option("--context-tokens", a->context_tokens, "context length of the prefix hit measured at each point, and of the verdict")
          ->capture_default_str()
          ->check(WholeNumber(1, 1ull << 30));
      cmd.add_option("--repeat", a->repeat, "runs per sweep point, the median is kept")
          ->capture_default_str()
          ->check(WholeNumber(1, 100));
      cmd.add_flag("--no-fio", a->no_fio, "skip the fio reference");
      cmd.add_flag("--no-serial", a->no_serial, "skip the serial pread baseline");
      cmd.add_flag("--no-encrypted", a->no_encrypted, "skip the encrypted (key_file=) row of directory targets");
      cmd.add_flag("--keep", a->keep, "keep the bench's files at the target");
      return [a] { return RunDatapath(*a); };
    });

}  // namespace
}  // namespace kvtier::tools
