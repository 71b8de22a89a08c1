// The charts of `kvtier report`: which series each chart draws, and the gnuplot script for it.
#include <algorithm>
#include <cstdio>
#include <map>

#include "eval/benchlib/report.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// gnuplot single-quoted strings escape a quote by doubling it. Titles come from result files: a
// control character (a newline would end the string and start a new gnuplot command) becomes a space.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    out += c == '\'' ? std::string("''") : std::string(1, c);
  }
  return out + "'";
}

double Num(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return 0;
  return j[key].get<double>();
}

std::string Str(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

// "file:///nvme/kv, 32.00 MiB chunks"
std::string RunLabel(const nlohmann::json& d) {
  const auto& target = d.value("target", nlohmann::json::object());
  const auto& model = d.value("model", nlohmann::json::object());
  return Str(target, "url") + ", " + FormatBytes(static_cast<uint64_t>(Num(model, "chunk_bytes"))) +
         " chunks";
}

PlotSpec InflightPlot(const ReportInputs& in) {
  PlotSpec p{"bandwidth_vs_inflight", "Cold read bandwidth against bytes in flight",
             "bytes in flight (MiB)", "GB/s (1e9 bytes/s)", true, {}};
  int color = 1;
  for (const auto& [name, d] : in.datapath) {
    // A memory tier has no bound on bytes in flight: it appears on the chunk-size chart only.
    if (Str(d.value("target", nlohmann::json::object()), "scheme") == "mem") continue;
    PlotSeries kv{"kvtier: " + RunLabel(d), {}, color, false};
    PlotSeries fio{"fio (same depth): " + RunLabel(d), {}, color, true};
    for (const auto& point : d.value("sweep", nlohmann::json::array())) {
      const double x = Num(point, "inflight_bytes") / kMiB;
      kv.points.emplace_back(x, Num(point.value("kvtier", nlohmann::json::object()), "gbps"));
      if (point.contains("fio") && point["fio"].is_object()) {
        fio.points.emplace_back(x, Num(point["fio"], "gbps"));
      }
    }
    if (!kv.points.empty()) p.series.push_back(kv);
    if (!fio.points.empty()) p.series.push_back(fio);
    ++color;
  }
  return p;
}

PlotSpec ChunkPlot(const ReportInputs& in) {
  PlotSpec p{"bandwidth_vs_chunk", "Best cold read bandwidth against chunk size", "chunk size (MiB)",
             "GB/s (1e9 bytes/s)", true, {}};
  // One group of series per target, points sorted by chunk size.
  std::map<std::string, std::vector<const nlohmann::json*>> by_target;
  for (const auto& [name, d] : in.datapath) {
    by_target[Str(d.value("target", nlohmann::json::object()), "url")].push_back(&d);
  }
  int color = 1;
  for (auto& [url, docs] : by_target) {
    std::sort(docs.begin(), docs.end(), [](const nlohmann::json* a, const nlohmann::json* b) {
      return Num((*a)["model"], "chunk_bytes") < Num((*b)["model"], "chunk_bytes");
    });
    PlotSeries kv{"kvtier best: " + url, {}, color, false};
    PlotSeries fio{"fio best: " + url, {}, color, true};
    PlotSeries serial{"serial pread: " + url, {}, color + 1, true};
    for (const nlohmann::json* d : docs) {
      const double x = Num((*d)["model"], "chunk_bytes") / kMiB;
      const auto& s = d->value("summary", nlohmann::json::object());
      if (Num(s, "gbps") > 0) kv.points.emplace_back(x, Num(s, "gbps"));
      if (Num(s, "best_fio_gbps") > 0) fio.points.emplace_back(x, Num(s, "best_fio_gbps"));
      if (Num(s, "serial_gbps") > 0) serial.points.emplace_back(x, Num(s, "serial_gbps"));
    }
    for (PlotSeries* series : {&kv, &fio, &serial}) {
      if (!series->points.empty()) p.series.push_back(*series);
    }
    color += 2;
  }
  return p;
}

PlotSpec TtftPlot(const std::string& file, const nlohmann::json& e2e, size_t index, size_t count) {
  PlotSpec p{count > 1 ? "ttft_vs_concurrency_" + std::to_string(index + 1) : "ttft_vs_concurrency",
             "TTFT against concurrency per mode (" + Str(e2e, "model_id") + ")", "concurrency",
             "TTFT (ms)", true, {}};
  std::map<std::string, std::vector<std::pair<double, nlohmann::json>>> by_mode;
  std::vector<std::string> order;
  for (const auto& row : e2e.value("rows", nlohmann::json::array())) {
    const std::string mode = Str(row, "mode");
    if (!by_mode.count(mode)) order.push_back(mode);
    by_mode[mode].emplace_back(Num(row, "concurrency"), row);
  }
  int color = 1;
  for (const std::string& mode : order) {
    auto& rows = by_mode[mode];
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    PlotSeries p50{mode + " p50", {}, color, false};
    PlotSeries p99{mode + " p99", {}, color, true};
    for (const auto& [x, row] : rows) {
      p50.points.emplace_back(x, Num(row, "ttft_p50_ms"));
      p99.points.emplace_back(x, Num(row, "ttft_p99_ms"));
    }
    p.series.push_back(p50);
    p.series.push_back(p99);
    ++color;
  }
  return p;
}

// "file:///nvme/kv, llama-3.1-8b (save.json)"
std::string SaveLabel(const std::string& file, const nlohmann::json& d) {
  return Str(d.value("target", nlohmann::json::object()), "url") + ", " +
         Str(d.value("model", nlohmann::json::object()), "preset") + " (" + file + ")";
}

// The steps of a save run in order of target rate: (target GB/s, step). The pointers are into `d` (not
// into a copy of its steps), so they live as long as `d`.
std::vector<std::pair<double, const nlohmann::json*>> StepsByRate(const nlohmann::json& d) {
  std::vector<std::pair<double, const nlohmann::json*>> out;
  const auto steps = d.is_object() ? d.find("steps") : d.end();
  if (steps == d.end() || !steps->is_array()) return out;
  for (const auto& step : *steps) out.emplace_back(Num(step, "target_gbps"), &step);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

PlotSpec SaveRatePlot(const ReportInputs& in) {
  PlotSpec p{"save_rate", "Saves: rate offered and absorbed against the target rate", "target rate (GB/s)",
             "GB/s (1e9 bytes/s)", false, {}};
  int color = 1;
  for (const auto& [file, d] : in.save) {
    const auto steps = StepsByRate(d);
    PlotSeries offered{"offered: " + SaveLabel(file, d), {}, color, false};
    PlotSeries absorbed{"absorbed: " + SaveLabel(file, d), {}, color + 1, false};
    for (const auto& [x, step] : steps) {
      offered.points.emplace_back(x, Num(*step, "offered_gbps"));
      absorbed.points.emplace_back(x, Num(*step, "absorbed_gbps"));
    }
    for (PlotSeries* series : {&offered, &absorbed}) {
      if (!series->points.empty()) p.series.push_back(*series);
    }
    const double fio = Num(d.value("fio_write", nlohmann::json::object()), "gbps");
    if (fio > 0 && !steps.empty()) {
      p.series.push_back({"fio O_DIRECT write, same disk: " + SaveLabel(file, d),
                          {{steps.front().first, fio}, {steps.back().first, fio}}, color + 2, true});
    }
    color += 3;
  }
  return p;
}

PlotSpec SaveDropsPlot(const ReportInputs& in) {
  PlotSpec p{"save_drops", "Saves dropped against the target rate", "target rate (GB/s)", "saves dropped", false, {}};
  int color = 1;
  for (const auto& [file, d] : in.save) {
    PlotSeries drops{"dropped: " + SaveLabel(file, d), {}, color++, false};
    for (const auto& [x, step] : StepsByRate(d)) drops.points.emplace_back(x, Num(*step, "dropped_saves"));
    if (!drops.points.empty()) p.series.push_back(drops);
  }
  return p;
}

}  // namespace

std::string GnuplotScript(const PlotSpec& spec, const std::string& svg_path) {
  std::string s;
  s += "# Drawn by `kvtier report`; redraw from this folder with: gnuplot " + spec.name + ".gp\n";
  s += "set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'\n";
  s += "set output " + Quote(svg_path) + "\n";
  s += "set termoption noenhanced\n";
  s += "set title " + Quote(spec.title) + "\n";
  s += "set xlabel " + Quote(spec.xlabel) + "\nset ylabel " + Quote(spec.ylabel) + "\n";
  s += "set grid\nset key below\nset yrange [0:*]\n";
  if (spec.log_x) s += "set logscale x 2\n";
  std::string plot;
  char line[96];
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const PlotSeries& series = spec.series[i];
    s += "$d" + std::to_string(i) + " << EOD\n";
    for (const auto& [x, y] : series.points) {
      std::snprintf(line, sizeof(line), "%.6g %.6g\n", x, y);
      s += line;
    }
    s += "EOD\n";
    plot += plot.empty() ? "plot " : ", \\\n     ";
    plot += "$d" + std::to_string(i) + " using 1:2 with linespoints lw 2 pt 7 lc " +
            std::to_string(series.color) + (series.dashed ? " dt 2" : " dt 1") + " title " +
            Quote(series.title);
  }
  if (plot.empty()) plot = "set label 'no data' at graph 0.5, 0.5 center\nplot NaN notitle";
  return s + plot + "\n";
}

std::vector<PlotSpec> ReportPlots(const ReportInputs& in) {
  std::vector<PlotSpec> plots;
  if (!in.datapath.empty()) {
    plots.push_back(InflightPlot(in));
    plots.push_back(ChunkPlot(in));
  }
  if (!in.save.empty()) {
    plots.push_back(SaveRatePlot(in));
    plots.push_back(SaveDropsPlot(in));
  }
  for (size_t i = 0; i < in.e2e.size(); ++i) {
    plots.push_back(TtftPlot(in.e2e[i].first, in.e2e[i].second, i, in.e2e.size()));
  }
  return plots;
}

}  // namespace kvtier::internal
