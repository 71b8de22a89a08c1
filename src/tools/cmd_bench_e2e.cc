// `kvtier bench e2e`: cold-recovery TTFT through the reference engine, every mode side by side.
#include <fstream>
#include <iostream>
#include <sstream>

#include "eval/e2e/e2e_bench.h"
#include "kvtier/tier.h"
#include "tools/cli_numbers.h"
#include "core/output_file.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct E2eArgs {
  internal::E2eOptions opt;
  std::string concurrency = "1,8,16,32";
  std::string modes = "recompute,mem,file,fs,mem+file";
  std::string pool;
  std::string json;
  bool quiet = false;
};

template <typename T>
Result<std::vector<T>> SplitList(const std::string& text) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    if constexpr (std::is_same_v<T, uint32_t>) {
      const auto n = ParseWholeNumber(item, 1, internal::kMaxE2eConcurrency);
      if (!n) {
        return Status::InvalidArgument("concurrency '" + item + "' is not a whole number in [1, " +
                                       std::to_string(internal::kMaxE2eConcurrency) + "]");
      }
      out.push_back(static_cast<uint32_t>(*n));
    } else {
      out.push_back(item);
    }
  }
  return out;
}

int RunE2e(E2eArgs a) {
  auto conc = SplitList<uint32_t>(a.concurrency);
  auto modes = SplitList<std::string>(a.modes);
  Status bad = !conc.ok() ? Status::InvalidArgument("--concurrency " + a.concurrency + ": " +
                                                    conc.status().message())
                         : modes.status();
  if (bad.ok() && !a.pool.empty()) {
    auto pool = ParseSize(a.pool);
    bad = pool.status();
    if (pool.ok()) a.opt.pool_bytes = *pool;
  }
  if (!bad.ok()) {
    std::cerr << "kvtier bench e2e: " << bad.ToString() << "\n";
    return 2;
  }
  a.opt.concurrency = *conc;
  a.opt.modes = *modes;
  a.opt.progress = !a.quiet;
  auto report = internal::RunE2e(a.opt, &std::cerr);
  if (!report.ok()) {
    std::cerr << "kvtier bench e2e: " << report.status().ToString() << "\n";
    return report.status().code() == Code::kInvalidArgument ? 2 : 1;
  }
  std::cout << internal::FormatTable(*report) << internal::MatchLine(*report) << "\n";
  if (!a.json.empty()) {
    const Status written = internal::WriteOutputFile(a.json, internal::ToJson(*report).dump(2) + "\n", "results");
    if (!written.ok()) {
      std::cerr << "kvtier bench e2e: " << written.ToString() << "\n";
      return 1;
    }
    std::cerr << "results written to " << a.json << "\n";
  }
  return report->outputs_matched == report->outputs_checked ? 0 : 1;
}

KVTIER_COMMAND("bench", "e2e",
               "cold-recovery TTFT through the reference engine: recompute vs mem/file/fs/mem+file",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<E2eArgs>();
                 cmd.add_option("--model", a->opt.model, "engine config: tiny, small, qwen2.5-0.5b, tiny-window, tiny-mla, tiny-hybrid")
                     ->capture_default_str();
                 cmd.add_option("--context", a->opt.workload.context_tokens, "cached context tokens per session")
                     ->capture_default_str()
                     ->check(WholeNumber(1, internal::kMaxE2eTokens));
                 cmd.add_option("--turn", a->opt.workload.turn_tokens, "new (uncached) tokens per returning turn")
                     ->capture_default_str()
                     ->check(WholeNumber(1, internal::kMaxE2eTokens));
                 cmd.add_option("--output", a->opt.workload.output_tokens, "greedy output tokens per request")
                     ->capture_default_str()
                     ->check(WholeNumber(1, internal::kMaxE2eOutputTokens));
                 cmd.add_option("--concurrency", a->concurrency, "client counts, e.g. 1,8,16,32")
                     ->capture_default_str();
                 cmd.add_option("--modes", a->modes, "modes to run")->capture_default_str();
                 cmd.add_option("--min-sessions", a->opt.min_sessions,
                                "sessions per level: max(concurrency, this)")
                     ->capture_default_str()
                     ->check(WholeNumber(1, internal::kMaxE2eSessions));
                 cmd.add_option("--pool", a->pool, "engine KV pool size (default: room for the top level)");
                 cmd.add_option("--dir", a->opt.dir,
                                "parent of the run's work folder for file:// and fs://, removed after "
                                "(default: $TMPDIR or /tmp)");
                 cmd.add_option("--prefill-step", a->opt.prefill_step, "tokens per chunked-prefill step")
                     ->capture_default_str()
                     ->check(WholeNumber(1, internal::kMaxE2eTokens));
                 cmd.add_option("--threads", a->opt.blas_threads, "OpenBLAS threads (0: one per core)")
                     ->capture_default_str()
                     ->check(WholeNumber(0, 4096));
                 cmd.add_option("--seed", a->opt.model_seed, "weight seed")
                     ->capture_default_str()
                     ->check(WholeNumber(0, UINT64_MAX));
                 cmd.add_option("--json", a->json, "write results as JSON to this file");
                 cmd.add_flag("--quiet", a->quiet, "no progress lines");
                 return [a] { return RunE2e(*a); };
               });

}  // namespace
}  // namespace kvtier::tools
