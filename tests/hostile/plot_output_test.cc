// Issue 23, failure 5 for the charts: gnuplot never writes a user's path itself. Report charts and
// the replay plot are drawn in a private directory and reach their destination through the one
// writer (core/output_file.h), so a link at an .svg path is refused and its target left alone.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "eval/benchlib/gnuplot.h"
#include "eval/benchlib/process.h"
#include "hostile/cli_runner.h"
#include "hostile/hostile_util.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;
using hostile::Describe;
using hostile::RunKvtier;

constexpr const char* kScript =
    "set terminal svg size 300,200\n"
    "set output 'plot.svg'\n"
    "plot x\n"
    "unset output\n";

// TMPDIR pointed at a folder of the test for one scope, so the private directories can be counted.
class ScopedTmpDir {
 public:
  explicit ScopedTmpDir(const std::string& dir) {
    if (const char* old = ::getenv("TMPDIR")) old_ = old, had_ = true;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpDir() { had_ ? (void)::setenv("TMPDIR", old_.c_str(), 1) : (void)::unsetenv("TMPDIR"); }

 private:
  std::string old_;
  bool had_ = false;
};

size_t Entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(OutputsAreNeverWrittenThroughALink, GnuplotDrawsPrivatelyAndTheOneWriterPlacesTheSvg) {
  if (!internal::OnPath("gnuplot")) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  TempDir dir;
  const std::string scratch = dir.path() + "/tmp";
  fs::create_directories(scratch);
  ScopedTmpDir tmp(scratch);
  const std::string svg = dir.path() + "/chart.svg";
  ASSERT_TRUE(internal::DrawSvgWithGnuplot(kScript, svg, "chart").ok());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(svg)));
  EXPECT_NE(ReadAll(svg).find("<svg"), std::string::npos);
  EXPECT_EQ(Entries(scratch), 0u) << "gnuplot's private directory was left behind";

  const std::string victim = dir.path() + "/victim", linked = dir.path() + "/linked.svg";
  { std::ofstream(victim) << "precious\n"; }
  fs::create_symlink(victim, linked);
  const Status s = internal::DrawSvgWithGnuplot(kScript, linked, "chart");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(ReadAll(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(linked));
  EXPECT_EQ(Entries(scratch), 0u) << "gnuplot's private directory was left behind";
}

TEST(OutputsAreNeverWrittenThroughALink, ReportRefusesALinkedChartAndLeavesItsTargetAlone) {
  if (!internal::OnPath("gnuplot")) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  TempDir dir;
  const std::string victim = dir.path() + "/victim", out = dir.path() + "/out";
  fs::create_directories(out);
  { std::ofstream(victim) << "precious\n"; }
  // The chart this results file draws first (report_plots.cc).
  fs::create_symlink(victim, out + "/bandwidth_vs_inflight.svg");
  const auto r = RunKvtier({"report", "--out", out, KVTIER_SOURCE_DIR "/docs/figures/datapath-file-2MiB.json"},
                           dir.path() + "/report.log");
  EXPECT_TRUE(r.exited) << Describe(r);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadAll(victim), "precious\n") << "gnuplot wrote through the link";
  EXPECT_TRUE(fs::is_symlink(out + "/bandwidth_vs_inflight.svg"));

  // Without the link the same command draws the chart as a regular file.
  fs::remove(out + "/bandwidth_vs_inflight.svg");
  const auto ok = RunKvtier({"report", "--out", out, KVTIER_SOURCE_DIR "/docs/figures/datapath-file-2MiB.json"},
                            dir.path() + "/report2.log");
  EXPECT_TRUE(ok.exited && ok.exit_code == 0) << Describe(ok);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out + "/bandwidth_vs_inflight.svg")));
  EXPECT_NE(ReadAll(out + "/bandwidth_vs_inflight.svg").find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::testing
