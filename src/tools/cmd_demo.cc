// `kvtier demo` (`make demo`): a short cold-recovery run through the reference engine. It prints the
// e2e table and one line saying whether the reloaded KV gave exactly the recompute's answers.
#include <iostream>

#include "eval/e2e/e2e_bench.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

int RunDemo() {
  internal::E2eOptions o;
  o.model = "small";
  o.workload.context_tokens = 4096;
  o.workload.turn_tokens = 128;
  o.workload.output_tokens = 16;
  o.concurrency = {1, 4};
  o.min_sessions = 2;
  std::cerr << "kvtier demo: returning sessions of " << o.workload.context_tokens
            << "-token contexts on the reference engine (`small`); recompute vs tiers\n";
  auto report = internal::RunE2e(o, &std::cerr);
  if (!report.ok()) {
    std::cerr << "kvtier demo: " << report.status().ToString() << "\n";
    return 1;
  }
  std::cout << internal::FormatTable(*report) << internal::MatchLine(*report) << "\n";
  return report->outputs_matched == report->outputs_checked ? 0 : 1;
}

KVTIER_COMMAND("", "demo", "short cold-recovery run: recompute vs mem/file/fs tiers, with an output check",
               [](CLI::App&) -> std::function<int()> { return [] { return RunDemo(); }; });

}  // namespace
}  // namespace kvtier::tools
