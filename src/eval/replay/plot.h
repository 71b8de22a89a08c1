// The capacity curve as an SVG: token hit ratio against capacity, drawn by gnuplot (gnuplot-nox).
//
// Thread-safe as long as two calls do not write the same file.
#pragma once

#include <optional>
#include <string>

#include "kvtier/status.h"
#include "eval/replay/report.h"

namespace kvtier::internal {

struct PlotOptions {
  std::string svg_path;
  // An extra horizontal line, e.g. a hit ratio published with the trace, to compare against.
  std::optional<double> reference_ratio;
  std::string reference_label;
};

// The gnuplot script that draws `report.sweep` (data inline), so it can be checked without gnuplot.
std::string SweepPlotScript(const ReplayReport& report, const PlotOptions& options);

// Draws the script with gnuplot and writes the SVG to options.svg_path through the one writer
// (eval/benchlib/gnuplot.h: gnuplot never writes that path itself, and a link there is refused, never
// followed). InvalidArgument when the report has no sweep or svg_path is not a regular file;
// NotSupported when gnuplot is not installed; IOError when gnuplot fails or draws nothing.
Status WriteSweepPlot(const ReplayReport& report, const PlotOptions& options);

}  // namespace kvtier::internal
