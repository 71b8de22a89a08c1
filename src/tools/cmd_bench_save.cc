// `kvtier bench save`: how fast a Store absorbs new KV fed at an engine's rate, next to fio's writes.
#include <iostream>
#include <memory>

#include "core/output_file.h"
#include "eval/benchlib/save_bench.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "progress/progress.h"
#include "tools/cli_numbers.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

int RunSaveBench(const internal::SaveBenchArgs& a, const std::string& json) {
  auto config = internal::MakeSaveBenchConfig(a);
  if (!config.ok()) {
    std::cerr << "kvtier bench save: " << config.status().ToString() << "\n";
    return 2;
  }
  internal::ProgressReporter progress = internal::ProgressReporter::ForStderr();
  config->progress = &progress;
  auto result = internal::RunSaveBench(*config);
  progress.Done();
  if (!result.ok()) {
    std::cerr << "kvtier bench save: " << result.status().ToString() << "\n";
    return 1;
  }
  std::cout << internal::FormatSummary(*result);
  if (!json.empty()) {
    const Status written = internal::WriteOutputFile(json, internal::ToJson(*result).dump(2) + "\n", "results");
    if (!written.ok()) {
      std::cerr << "kvtier bench save: " << written.ToString() << "\n";
      return 1;
    }
    std::cerr << "results written to " << json << "\n";
  }
  return 0;
}

KVTIER_COMMAND(
    "bench", "save",
    "feed a Store new KV at a GPU's prefill rate, find the highest rate it absorbs without drops, next to fio",
    [](CLI::App& cmd) -> std::function<int()> {
      auto a = std::make_shared<internal::SaveBenchArgs>();
      auto json = std::make_shared<std::string>();
      cmd.add_option("--target", a->target,
                     "file://DIR or fs://DIR on the disk to measure: the default lowest tier and fio's files")
          ->required();
      cmd.add_option("--tier", a->tiers, "a Store tier URL, fastest first (repeatable; default: mem:// over --target)");
      cmd.add_option("--model", a->model, "model preset: KV bytes per token and chunk layout")->capture_default_str();
      cmd.add_option("--chunk-tokens", a->chunk_tokens, "tokens per chunk (default: the preset's)")
          ->check(WholeNumber(1, 1u << 20));
      cmd.add_option("--gpu", a->gpu, "GPU profile for the prefill rate: " + internal::GpuProfileNames())->capture_default_str();
      cmd.add_option("--gpus", a->gpus, "GPUs feeding the store")->capture_default_str()->check(WholeNumber(1, 4096));
      cmd.add_option("--rate", a->rate, "start rate instead of the GPU's, e.g. 2GB/s");
      cmd.add_option("--context-tokens", a->context_tokens, "tokens of one prefill: one Save call")
          ->capture_default_str()
          ->check(WholeNumber(1, 1ull << 24));
      cmd.add_option("--seconds", a->seconds, "seconds of feeding per rate step")
          ->capture_default_str()
          ->check(FiniteNumber(0.001, 3600));
      cmd.add_option("--max-seconds", a->max_seconds, "bound on the steps' total time")
          ->capture_default_str()
          ->check(FiniteNumber(0.001, 86400));
      cmd.add_option("--bisect", a->bisections, "bisections once drops are bracketed")
          ->capture_default_str()
          ->check(WholeNumber(0, 20));
      cmd.add_option("--mem", a->mem, "mem:// tier capacity (default: the queue + two saves)");
      cmd.add_option("--queue-bytes", a->queue_bytes, "the Store's background queue bound")->capture_default_str();
      cmd.add_option("--queue-chunks", a->queue_chunks, "the queue's bound in chunks")
          ->capture_default_str()
          ->check(WholeNumber(1, 1u << 24));
      cmd.add_option("--background-threads", a->background_threads, "the Store's background writers")
          ->capture_default_str()
          ->check(WholeNumber(1, 256));
      cmd.add_option("--feeders", a->feeders, "feeder threads (default: one per GPU, at most 64)")
          ->check(WholeNumber(1, 256));
      cmd.add_option("--fio-bytes", a->fio_bytes, "bytes fio writes for the reference")->capture_default_str();
      cmd.add_option("--fio-depth", a->fio_depth, "fio's iodepth")->capture_default_str()->check(WholeNumber(1, 1024));
      cmd.add_flag("--no-fio", a->no_fio, "skip the fio write reference");
      cmd.add_flag("--keep", a->keep, "keep the work folder");
      cmd.add_option("--json", *json, "write the results (schema kvtier.bench.save/1) here");
      return [a, json] { return RunSaveBench(*a, *json); };
    });

}  // namespace
}  // namespace kvtier::tools
