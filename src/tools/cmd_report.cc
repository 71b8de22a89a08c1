// `kvtier report RESULTS.json... --out DIR`: charts (SVG, via gnuplot) and report.md from bench results.
#include <iostream>
#include <memory>

#include "eval/benchlib/report.h"
#include "tools/command.h"

namespace kvtier::tools {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string out = "kvtier-report";
  bool no_plots = false;
};

std::string CommandLine(const ReportArgs& a) {
  std::string line = "kvtier report";
  for (const auto& in : a.inputs) line += " " + in;
  return line + " --out " + a.out;
}

int RunReport(const ReportArgs& a) {
  auto inputs = internal::LoadReportInputs(a.inputs);
  if (!inputs.ok()) {
    std::cerr << "kvtier report: " << inputs.status().ToString() << "\n";
    return 2;
  }
  internal::ReportOptions options;
  options.out_dir = a.out;
  options.run_gnuplot = !a.no_plots;
  options.command_line = CommandLine(a);
  auto written = internal::WriteReport(*inputs, options);
  if (!written.ok()) {
    std::cerr << "kvtier report: " << written.status().ToString() << "\n";
    return 1;
  }
  for (const auto& path : *written) std::cout << path << "\n";
  return 0;
}

KVTIER_COMMAND("", "report",
               "draw SVG charts and a report.md from `kvtier bench datapath|save|e2e --json` results",
               [](CLI::App& cmd) -> std::function<int()> {
                 auto a = std::make_shared<ReportArgs>();
                 cmd.add_option("results", a->inputs, "result JSON files")->required();
                 cmd.add_option("--out", a->out, "output folder")->capture_default_str();
                 cmd.add_flag("--no-plots", a->no_plots, "write the gnuplot scripts but do not run gnuplot");
                 return [a] { return RunReport(*a); };
               });

}  // namespace
}  // namespace kvtier::tools
