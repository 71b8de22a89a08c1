// `kvtier report`: reading results, report.md, and drawing the charts with gnuplot.
#include "eval/benchlib/report.h"

#include "core/output_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/benchlib/datapath_io.h"
#include "eval/benchlib/gnuplot.h"
#include "eval/benchlib/process.h"
#include "eval/benchlib/results.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace fs = std::filesystem;

namespace {

const nlohmann::json& Get(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null_json;
  return j.is_object() && j.contains(key) ? j[key] : null_json;
}

std::string Fmt(const char* format, const nlohmann::json& v, double scale = 1) {
  if (!v.is_number()) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v.get<double>() * scale);
  return buf;
}

// The accessors below never throw: LoadReportInputs checked the shape, and anything else reads "n/a".
std::string Bytes(const nlohmann::json& v) {
  return v.is_number_unsigned() ? FormatBytes(v.get<uint64_t>()) : "n/a";
}

std::string Str(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : "n/a"; }

std::string Int(const nlohmann::json& v) {
  return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>()) : "n/a";
}

std::string BreakEven(const nlohmann::json& verdict) {
  const auto& t = Get(verdict, "break_even_tokens");
  if (!t.is_number_unsigned()) return "n/a";
  return t.get<uint64_t>() == 0 ? "loading always wins" : std::to_string(t.get<uint64_t>()) + " tokens";
}

void TargetTable(const ReportInputs& in, std::ostringstream& md) {
  md << "| Target | Model, chunk | Shared | Cold reads | kvtier GB/s (in flight) | fio GB/s, same depth "
        "| kvtier / fio | fio GB/s, best depth | kvtier / best fio | Chunk p50 / p99 ms | Verify + copy GB/s (CPU) | Serial pread GB/s | Parallel / serial | 32K-token load "
        "| Recompute (est.) | TTFT saved per hit (est.) | Break-even (est.) |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [file, d] : in.datapath) {
    const auto& t = Get(d, "target");
    const auto& m = Get(d, "model");
    const auto& s = Get(d, "summary");
    const auto& c = Get(d, "context");
    const auto& v = Get(d, "verdict");
    md << "| `" << Str(Get(t, "url")) << "` | " << Str(Get(m, "preset"))
       << ", " << Bytes(Get(m, "chunk_bytes")) << " | " << (Get(t, "shared") == true ? "yes" : "no")
       << " | " << Str(Get(t, "cold_method")) << " | " << Fmt("%.2f", Get(s, "gbps"))
       << " (" << Bytes(Get(s, "best_inflight_bytes")) << ") | " << Fmt("%.2f", Get(s, "fio_gbps"))
       << " | " << Fmt("%.0f%%", Get(s, "ratio_to_fio"), 100) << " | "
       << Fmt("%.2f", Get(s, "best_fio_gbps")) << " | " << Fmt("%.0f%%", Get(s, "ratio_to_best_fio"), 100)
       << " | "
       << Fmt("%.1f", Get(s, "p50_us"), 1e-3) << " / " << Fmt("%.1f", Get(s, "p99_us"), 1e-3) << " | "
       << Fmt("%.2f", Get(Get(d, "verify_copy"), "gbps")) << " | " << Fmt("%.2f", Get(s, "serial_gbps")) << " | " << Fmt("%.2fx", Get(s, "speedup_over_serial"))
       << " | " << Fmt("%.2f s", Get(c, "load_seconds")) << " | "
       << Fmt("%.2f s", Get(v, "recompute_seconds")) << " | "
       << Fmt("%.2f s", Get(v, "ttft_saved_seconds")) << " | " << BreakEven(v) << " |\n";
  }
}

// True when a result's kvtier/fio ratios are the median of its runs' paired ratios (results.h), which
// results written before 2026-12-03 17:08 UTC do not carry.
bool PairedRatios(const nlohmann::json& d) {
  for (const auto& p : Get(d, "sweep")) {
    if (p.is_object() && p.contains("read_ratios_to_fio") && p["read_ratios_to_fio"].size() > 1) return true;
  }
  return false;
}

// " (M wrong bytes)" where a sweep point's errors include chunks read with the wrong bytes (results
// written before `wrong_bytes` have none to say).
std::string WrongBytes(const nlohmann::json& kvtier) {
  const auto& w = Get(kvtier, "wrong_bytes");
  if (!w.is_number_unsigned() || w.get<uint64_t>() == 0) return "";
  return " (" + Int(w) + " wrong bytes)";
}

void SweepTables(const ReportInputs& in, std::ostringstream& md) {
  for (const auto& [file, d] : in.datapath) {
    md << "\n**" << Str(Get(Get(d, "target"), "url")) << ", "
       << Str(Get(Get(d, "model"), "layout")) << "** (`" << file << "`, "
       << Str(Get(d, "started_at")) << ", median of " << Int(Get(d, "repeat")) << " run(s) per row"
       << (PairedRatios(d) ? "; kvtier / fio is the median of the runs' ratios, kvtier and fio back to back in each run"
                           : "")
       << ")\n\n";
    md << "| In flight | kvtier GB/s | p50 ms | p99 ms | fio GB/s | fio p50 ms | fio p99 ms | kvtier / fio "
          "| errors |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& p : Get(d, "sweep")) {
      const auto& k = Get(p, "kvtier");
      const auto& f = Get(p, "fio");
      md << "| " << Bytes(Get(p, "inflight_bytes")) << " | " << Fmt("%.2f", Get(k, "gbps")) << " | "
         << Fmt("%.1f", Get(k, "p50_us"), 1e-3) << " | " << Fmt("%.1f", Get(k, "p99_us"), 1e-3) << " | "
         << Fmt("%.2f", Get(f, "gbps")) << " | " << Fmt("%.1f", Get(f, "p50_us"), 1e-3) << " | "
         << Fmt("%.1f", Get(f, "p99_us"), 1e-3) << " | " << Fmt("%.0f%%", Get(p, "ratio_to_fio"), 100)
         << " | " << Int(Get(k, "errors")) << WrongBytes(k) << " |\n";
    }
    const auto& note = Get(d, "fio_note");
    if (note.is_string() && !Str(note).empty()) {
      md << "\nfio: " << Str(note) << "\n";
    }
    const auto& v = Get(d, "verdict");
    if (v.is_object()) {
      const auto& profile = Get(v, "profile");
      if (profile.is_string()) {
        md << "\nRecompute is modelled from profile " << Str(profile) << ", a "
           << Int(Get(v, "context_tokens")) << "-token context.\n";
      } else {  // a results file of a version without the profile label
        md << "\nEstimates assume " << Str(Get(v, "description")) << " at "
           << Fmt("%.0f", Get(v, "peak_tflops")) << " TFLOP/s dense bf16 x MFU "
           << Fmt("%.2f", Get(v, "mfu")) << " (" << Str(Get(v, "source")) << "), a "
           << Int(Get(v, "context_tokens")) << "-token context.\n";
      }
    }
  }
}

void E2eTables(const ReportInputs& in, std::ostringstream& md) {
  for (const auto& [file, e] : in.e2e) {
    md << "\n**" << Str(Get(e, "model_id")) << "** (`" << file << "`)\n\n";
    md << "| Mode | Concurrency | TTFT p50 ms | p90 ms | p99 ms | Speedup p50 | Same output |\n"
          "|---|---|---|---|---|---|---|\n";
    for (const auto& r : Get(e, "rows")) {
      md << "| " << Str(Get(r, "mode")) << " | " << Int(Get(r, "concurrency")) << " | "
         << Fmt("%.0f", Get(r, "ttft_p50_ms")) << " | " << Fmt("%.0f", Get(r, "ttft_p90_ms")) << " | "
         << Fmt("%.0f", Get(r, "ttft_p99_ms")) << " | " << Fmt("%.2fx", Get(r, "speedup_p50")) << " | "
         << Int(Get(r, "outputs_matched")) << "/" << Int(Get(r, "outputs_checked")) << " |\n";
    }
  }
}

void SaveTables(const ReportInputs& in, std::ostringstream& md) {
  for (const auto& [file, d] : in.save) {
    const auto& s = Get(d, "summary");
    const auto& feed = Get(d, "feed");
    md << "\n**" << Str(Get(Get(d, "target"), "url")) << ", " << Str(Get(Get(d, "model"), "preset")) << "** (`"
       << file << "`, " << Str(Get(d, "started_at")) << "; " << Int(Get(feed, "context_tokens"))
       << " tokens per Save, " << Int(Get(feed, "gpus")) << " GPU(s), steps of "
       << Fmt("%.1f", Get(feed, "step_seconds")) << " s)\n\n";
    md << "| Target GB/s | Offered GB/s | Absorbed GB/s | Dropped saves | Queue max | Save p50 / p99 / max ms "
          "| No drops |\n|---|---|---|---|---|---|---|\n";
    for (const auto& step : Get(d, "steps")) {
      const auto& l = Get(step, "save_latency");
      md << "| " << Fmt("%.2f", Get(step, "target_gbps")) << " | " << Fmt("%.2f", Get(step, "offered_gbps"))
         << " | " << Fmt("%.2f", Get(step, "absorbed_gbps")) << " | " << Int(Get(step, "dropped_saves")) << " | "
         << Bytes(Get(step, "queue_max_bytes")) << " | " << Fmt("%.1f", Get(l, "p50_ms")) << " / "
         << Fmt("%.1f", Get(l, "p99_ms")) << " / " << Fmt("%.1f", Get(l, "max_ms")) << " | "
         << (Get(step, "passed") == true ? "yes" : "no") << " |\n";
    }
    md << "\nHighest drop-free rate: " << Fmt("%.2f GB/s", Get(s, "highest_drop_free_gbps"))
       << "; fio O_DIRECT write of the same disk: " << Fmt("%.2f GB/s", Get(s, "fio_write_gbps"))
       << "; ratio: " << Fmt("%.0f%%", Get(s, "ratio_to_fio_write"), 100) << " (that step's absorbed rate, "
       << "its drain included: " << Fmt("%.2f GB/s", Get(s, "best_step_absorbed_gbps")) << ", "
       << Fmt("%.0f%%", Get(s, "ratio_absorbed_to_fio_write"), 100) << "). Search: "
       << Str(Get(s, "stop_reason")) << ".\n";
    const auto& note = Get(d, "fio_note");
    if (note.is_string() && !Str(note).empty()) md << "\nfio: " << Str(note) << "\n";
  }
}

}  // namespace

std::string ReportMarkdown(const ReportInputs& in, const std::vector<PlotSpec>& plots,
                           const std::string& command_line) {
  std::ostringstream md;
  md << "# kvtier storage qualification report\n\n";
  md << "Written by `" << command_line << "` on " << UtcNow() << ". Every bandwidth is measured; ";
  if (!in.datapath.empty()) {
    md << "fio read the same chunk files (one request per file, O_DIRECT, the same queue depth) in the same run. ";
  }
  if (!in.save.empty()) {
    md << "The save bench's fio reference wrote files of the chunk size with O_DIRECT on the same disk in the same run. ";
  }
  md << "GB/s = 1e9 bytes/s. Recompute times are ESTIMATES from peak FLOP/s and an assumed MFU.\n";
  if (!in.datapath.empty()) {
    md << "\n## Targets\n\n";
    TargetTable(in, md);
    md << "\n## Sweeps\n";
    SweepTables(in, md);
  }
  if (!in.save.empty()) {
    md << "\n## Saves (`kvtier bench save`)\n";
    SaveTables(in, md);
  }
  if (!in.e2e.empty()) {
    md << "\n## End to end (reference engine)\n";
    E2eTables(in, md);
  }
  if (!plots.empty()) md << "\n## Charts\n\n";
  for (const PlotSpec& p : plots) md << "![" << p.title << "](" << p.name << ".svg)\n\n";
  return md.str();
}

Result<std::vector<std::string>> WriteReport(const ReportInputs& in, const ReportOptions& options) {
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "create " + options.out_dir);
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& text) -> Status {
    const std::string path = (fs::path(options.out_dir) / name).string();
    KVTIER_RETURN_IF_ERROR(WriteOutputFile(path, text, "report output"));
    written.push_back(path);
    return Status::OK();
  };
  const std::vector<PlotSpec> plots = ReportPlots(in);
  KVTIER_RETURN_IF_ERROR(write("report.md", ReportMarkdown(in, plots, options.command_line)));
  const bool have_gnuplot = OnPath("gnuplot");
  for (const PlotSpec& p : plots) {
    // Paths relative to out_dir, so the scripts still work once the folder is moved or committed.
    KVTIER_RETURN_IF_ERROR(write(p.name + ".gp", GnuplotScript(p, p.name + ".svg")));
    if (!options.run_gnuplot || !have_gnuplot) continue;
    // gnuplot draws in a private directory; the SVG reaches out_dir through the one writer.
    const std::string svg = (fs::path(options.out_dir) / (p.name + ".svg")).string();
    KVTIER_RETURN_IF_ERROR(DrawSvgWithGnuplot(GnuplotScript(p, kGnuplotScratchSvg), svg, "report chart"));
    written.push_back(svg);
  }
  if (options.run_gnuplot && !have_gnuplot && !plots.empty()) {
    return Status::NotSupported("gnuplot is not installed (Debian: gnuplot-nox); wrote the .gp scripts "
                                "and report.md only");
  }
  return written;
}

}  // namespace kvtier::internal
