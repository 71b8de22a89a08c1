#include "eval/replay/plot.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "eval/benchlib/gnuplot.h"

namespace kvtier::internal {
namespace {

// A gnuplot single-quoted string: only the quote itself needs escaping (doubled).
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Fixed4(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", v);
  return buf;
}

}  // namespace

std::string SweepPlotScript(const ReplayReport& r, const PlotOptions& o) {
  const double gib_per_mtoken =
      1e6 * static_cast<double>(r.scale.ModelBlockBytes()) / r.scale.block_tokens / (1ull << 30);
  std::string s;
  s += "$sweep << EOD\n";
  for (const ReplaySweepPoint& p : r.sweep) {
    s += Num(p.capacity_tokens / 1e6) + " " + Num(p.run.TokenHitRatio()) + "\n";
  }
  s += "EOD\n";
  s += "set terminal svg size 900,560 dynamic enhanced font 'sans,13' background rgb 'white'\n";
  s += "set output " + Quote(o.svg_path) + "\n";
  s += "set title " +
       Quote("kvtier replay: " + std::filesystem::path(r.trace_path).filename().string() + " (" +
             std::to_string(r.summary.requests) + " requests)") +
       " noenhanced\n";
  s += "set xlabel 'capacity (million tokens)'\n";
  s += "set x2label " + Quote("capacity (GiB of " + std::string(r.model.name) + " KV)") +
       " noenhanced\n";
  s += "set ylabel 'token hit ratio (prefix reuse)'\n";
  // Both axes are logarithmic, so the GiB axis is the token axis with its range scaled (gnuplot
  // cannot link nonlinear axes).
  double lo = r.sweep.front().capacity_tokens / 1e6, hi = lo;
  for (const ReplaySweepPoint& p : r.sweep) {
    lo = std::min(lo, p.capacity_tokens / 1e6);
    hi = std::max(hi, p.capacity_tokens / 1e6);
  }
  lo /= 1.5;
  hi *= 1.5;
  s += "set logscale x\nset logscale x2\nset xtics nomirror\nset x2tics\n";
  s += "set xrange [" + Num(lo) + ":" + Num(hi) + "]\n";
  s += "set x2range [" + Num(lo * gib_per_mtoken) + ":" + Num(hi * gib_per_mtoken) + "]\n";
  s += "set yrange [0:1]\nset ytics 0.1\nset grid\nset key bottom right\n";
  s += "plot $sweep using 1:2 with linespoints lw 2 pt 7 title " +
       Quote("replayed through the Store (" +
             std::string(AdmissionName(r.sweep.front().run.admission)) + ")") +
       " noenhanced";
  s += ", " + Num(r.summary.UnlimitedHitRatio()) + " with lines dt 2 lw 2 title " +
       Quote("unlimited capacity " + Fixed4(r.summary.UnlimitedHitRatio()));
  if (o.reference_ratio) {
    s += ", " + Num(*o.reference_ratio) + " with lines dt 3 lw 2 title " +
         Quote(o.reference_label.empty() ? "reference" : o.reference_label) + " noenhanced";
  }
  s += "\nunset output\n";
  return s;
}

Status WriteSweepPlot(const ReplayReport& r, const PlotOptions& o) {
  if (r.sweep.empty()) return Status::InvalidArgument("no sweep to plot");
  // gnuplot draws in a private directory; the SVG reaches o.svg_path through the one writer.
  PlotOptions scratch = o;
  scratch.svg_path = kGnuplotScratchSvg;
  return DrawSvgWithGnuplot(SweepPlotScript(r, scratch), o.svg_path, "replay plot");
}

}  // namespace kvtier::internal
