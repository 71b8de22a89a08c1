// `kvtier report`: turns bench results into SVG charts (drawn by gnuplot) and a short report.md.
//
// Inputs are JSON files written by `kvtier bench datapath --json` (schema kvtier.bench.datapath/1)
// and, when present, by `kvtier bench e2e --json` ("bench": "e2e") and `kvtier bench save --json`
// (schema kvtier.bench.save/1). Charts:
//   bandwidth_vs_inflight.svg   kvtier and fio GB/s against bytes in flight, one pair per datapath run
//   bandwidth_vs_chunk.svg      best kvtier, best fio and serial pread GB/s against chunk size
//   ttft_vs_concurrency[_N].svg TTFT p50 and p99 against concurrency per mode, one per e2e file
//   save_rate.svg               per save run: rate offered and absorbed against the target rate of each
//                               step, and fio's write rate of the same disk as a dashed line
//   save_drops.svg              per save run: saves dropped against the target rate of each step
// Each chart's gnuplot script (.gp, data inline) is kept beside it so it can be redrawn or edited.
//
// Thread-compatible; WriteReport blocks while gnuplot runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/status.h"

namespace kvtier::internal {

struct ReportInputs {
  std::vector<std::pair<std::string, nlohmann::json>> datapath;  // (file name, document)
  std::vector<std::pair<std::string, nlohmann::json>> e2e;
  std::vector<std::pair<std::string, nlohmann::json>> save;
};

// The memory bound of `kvtier report`: all inputs together hold at most this many JSON values, nested
// at most this deep (counted without building them, before they are parsed). A parsed value costs
// about 100 bytes, so the documents take at most about 200 MB; a real result has a few thousand.
inline constexpr uint64_t kMaxReportJsonValues = 2'000'000;
inline constexpr uint64_t kMaxReportJsonDepth = 64;

// Reads, classifies and checks the shape of each file (every field the report reads must be present
// with its type), so rendering never meets a value of the wrong type. InvalidArgument naming the file
// (and the field) when it is not a regular file, is larger than 64 MiB, holds more values or deeper
// nesting than the bound above, is not JSON, is not a result kvtier knows or has the wrong shape;
// NotFound when it is missing; IOError when it cannot be read.
Result<ReportInputs> LoadReportInputs(const std::vector<std::string>& paths);

struct PlotSeries {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
  int color = 1;        // gnuplot line colour index; a kvtier/fio pair shares one
  bool dashed = false;
};

struct PlotSpec {
  std::string name;  // file stem: NAME.svg and NAME.gp
  std::string title, xlabel, ylabel;
  bool log_x = false;
  std::vector<PlotSeries> series;
};

// A self-contained gnuplot script (data inline) that draws `spec` into `svg_path`.
std::string GnuplotScript(const PlotSpec& spec, const std::string& svg_path);

// The charts the inputs support (none for an input kind that is absent).
std::vector<PlotSpec> ReportPlots(const ReportInputs& inputs);

// The markdown report embedding `plots` (by relative file name).
std::string ReportMarkdown(const ReportInputs& inputs, const std::vector<PlotSpec>& plots,
                           const std::string& command_line);

struct ReportOptions {
  std::string out_dir;
  bool run_gnuplot = true;    // false: write the .gp scripts and report.md only
  std::string command_line;   // quoted in report.md so the figures can be reproduced
};

// Writes report.md, every .gp script and (with run_gnuplot) every SVG into out_dir, creating it; every
// file, SVGs included, goes through the one writer (core/output_file.h; gnuplot draws in a private
// directory, eval/benchlib/gnuplot.h), so nothing is written through a link in out_dir.
// Returns the files written. NotSupported when gnuplot is not installed (the scripts and report.md
// are still written); IOError when a file cannot be written or gnuplot fails.
Result<std::vector<std::string>> WriteReport(const ReportInputs& inputs, const ReportOptions& options);

}  // namespace kvtier::internal
