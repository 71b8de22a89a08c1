// Input files from outside: bench results read by `kvtier report`, request traces read by `kvtier
// replay`, fio's JSON output. Each is bounded in size and line length, must be a regular file, and is
// checked for shape: a clear one-line error and a non-zero exit, never an abort or unbounded memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "eval/benchlib/fio_runner.h"
#include "eval/benchlib/report.h"
#include "eval/benchlib/results.h"
#include "core/input_file.h"
#include "hostile/cli_runner.h"
#include "eval/replay/trace.h"
#include "support/temp_dir.h"

namespace kvtier::internal {
namespace {

using hostile::CliResult;
using hostile::Describe;
using hostile::RunKvtier;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A sparse file of `size` zero bytes: no newline, no JSON, no disk space used.
void WriteSparse(const std::string& path, off_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, size), 0);
  ::close(fd);
}

// A complete, valid `kvtier bench datapath --json` document.
nlohmann::json ValidDatapath() {
  DatapathResult r;
  r.started_at = "2025-01-01T00:00:00Z";
  r.target.url = "file:///nvme/kv";
  r.target.scheme = "file";
  r.target.cold_method = "O_DIRECT";
  r.model_preset = "llama-3.1-8b";
  r.layout = "32x8x128 bf16";
  r.chunk_tokens = 256;
  r.chunk_bytes = 32 << 20;
  r.bytes_per_token = 128 << 10;
  r.context_tokens = 32768;
  for (uint64_t depth : {1, 4}) {
    SweepPoint p;
    p.inflight_bytes = depth * r.chunk_bytes;
    p.kvtier = {16, 16 * r.chunk_bytes, 1.0 / depth, 0, 100, 200};
    FioResult f;
    f.bytes_per_second = 1e9 * depth;
    p.fio = f;
    r.sweep.push_back(p);
  }
  r.serial_pread = PhaseResult{16, 16 * r.chunk_bytes, 2.0, 0, 0, 0};
  r.verify_copy = PhaseResult{16, 16 * r.chunk_bytes, 0.5, 0, 0, 0};
  auto gpu = FindGpuProfile("h200");
  EXPECT_TRUE(gpu.ok());
  r.gpu = *gpu;
  return ToJson(r);
}

nlohmann::json ValidE2e() {
  return nlohmann::json::parse(R"({"bench": "e2e", "model_id": "tiny", "rows": [
      {"mode": "recompute", "concurrency": 1, "ttft_p50_ms": 10.0, "ttft_p90_ms": 11.0,
       "ttft_p99_ms": 12.0, "speedup_p50": 1.0, "outputs_checked": 1, "outputs_matched": 1},
      {"mode": "file", "concurrency": 1, "ttft_p50_ms": 2.0, "ttft_p90_ms": 3.0,
       "ttft_p99_ms": 4.0, "speedup_p50": 5.0, "outputs_checked": 1, "outputs_matched": 1}]})");
}

// Every value inside `doc` (objects and arrays included), each replaced by each of `replacements`.
void ForEachMutation(const nlohmann::json& doc,
                     const std::function<void(const nlohmann::json&, const std::string&)>& fn) {
  const std::vector<nlohmann::json> replacements = {
      nullptr, "text", -1, 1.5, 1e300, -1e300, true, nlohmann::json::array(), nlohmann::json::object(),
      nlohmann::json::array({1, "x", nullptr}), 18446744073709551615ull};
  const nlohmann::json flat = doc.flatten();
  std::vector<std::string> pointers;
  for (const auto& [ptr, v] : flat.items()) {
    // Every prefix of every leaf pointer: the leaves and the containers above them.
    for (size_t at = ptr.find('/', 1); at != std::string::npos; at = ptr.find('/', at + 1)) {
      pointers.push_back(ptr.substr(0, at));
    }
    pointers.push_back(ptr);
  }
  std::sort(pointers.begin(), pointers.end());
  pointers.erase(std::unique(pointers.begin(), pointers.end()), pointers.end());
  for (const std::string& p : pointers) {
    for (const nlohmann::json& r : replacements) {
      nlohmann::json m = doc;
      m[nlohmann::json::json_pointer(p)] = r;
      fn(m, p + " = " + r.dump());
    }
    nlohmann::json removed = doc;
    const nlohmann::json::json_pointer jp(p);
    removed[jp.parent_pointer()].is_object() ? (void)removed[jp.parent_pointer()].erase(jp.back())
                                             : (void)0;
    fn(removed, "without " + p);
  }
}

TEST(HostileReportInputs, ValidResultsStillMakeAReport) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  WriteText(dir.path() + "/d.json", ValidDatapath().dump());
  WriteText(dir.path() + "/e.json", ValidE2e().dump());
  auto in = LoadReportInputs({dir.path() + "/d.json", dir.path() + "/e.json"});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->datapath.size(), 1u);
  EXPECT_EQ(in->e2e.size(), 1u);
  const CliResult r = RunKvtier({"report", dir.path() + "/d.json", dir.path() + "/e.json", "--out",
                                 dir.path() + "/out", "--no-plots"},
                                dir.path() + "/log");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
}

// In process, for speed: every value of a valid document replaced by every wrong type (and every key
// removed) either loads and renders without throwing, or is refused as InvalidArgument naming the
// file. Fields the report reads must be refused.
TEST(HostileReportInputs, EveryMutationOfAValidResultIsRenderedOrRefusedNeverThrown) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/r.json";
  size_t refused = 0, total = 0;
  auto check = [&](const nlohmann::json& doc, const std::string& what) {
    ++total;
    WriteText(path, doc.dump());
    Result<ReportInputs> in = Status::Internal("not run");
    ASSERT_NO_THROW(in = LoadReportInputs({path})) << what;
    if (!in.ok()) {
      ++refused;
      EXPECT_EQ(in.status().code(), Code::kInvalidArgument) << what;
      EXPECT_NE(in.status().message().find(path), std::string::npos) << what;
      EXPECT_EQ(in.status().message().find('\n'), std::string::npos) << what;
      return;
    }
    ASSERT_NO_THROW({
      const auto plots = ReportPlots(*in);
      for (const auto& p : plots) (void)GnuplotScript(p, p.name + ".svg");
      (void)ReportMarkdown(*in, plots, "kvtier report");
    }) << what;
  };
  ForEachMutation(ValidDatapath(), check);
  ForEachMutation(ValidE2e(), check);
  EXPECT_GT(refused, total / 3) << "many mutations hit a field the report reads";
  EXPECT_LT(refused, total) << "fields the report does not read may hold anything";
  // Fields the report reads, each with a wrong type: refused.
  for (const char* p : {"/target", "/target/url", "/model/chunk_bytes", "/sweep", "/sweep/0",
                        "/sweep/0/kvtier/gbps", "/summary/gbps", "/verdict/break_even_tokens",
                        "/context/load_seconds", "/started_at", "/repeat", "/sweep/0/kvtier/wrong_bytes"}) {
    nlohmann::json m = ValidDatapath();
    m[nlohmann::json::json_pointer(p)] = true;  // the wrong type for each of these
    WriteText(path, m.dump());
    auto in = LoadReportInputs({path});
    EXPECT_FALSE(in.ok()) << p;
  }
}

// The CLI itself, on documents of every wrong shape: a one-line error and exit code 2, never a signal.
TEST(HostileReportInputs, TheCliRefusesWrongShapesWithOneLine) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const nlohmann::json d = ValidDatapath();
  std::vector<std::string> docs = {
      "", "   ", "[]", "[1,2,3]", "\"a string\"", "42", "null", "true", "{}", "{\"schema\": 5}",
      "{\"schema\": \"kvtier.bench.datapath/1\"}", "{\"bench\": \"e2e\"}",
      "{\"bench\": \"e2e\", \"model_id\": \"m\", \"rows\": {}}",
      "{\"bench\": \"e2e\", \"model_id\": \"m\", \"rows\": [\"row\"]}",
      "{\"bench\": \"e2e\", \"model_id\": \"m\", \"rows\": [{\"mode\": 1}]}",
      "{\"bench\": \"e2e\", \"model_id\": 7, \"rows\": []}",
      "{\"bench\": [\"e2e\"], \"rows\": []}", "{\"schema\": \"kvtier.bench.datapath/1\", \"target\": [",
      "\xff\xfe{}", "{\"a\": \"\xc3\x28\"}",
  };
  for (const auto& [ptr, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"/target", "file:///x"},
                                                          {"/target/url", 5},
                                                          {"/model/chunk_bytes", -1},
                                                          {"/model/chunk_bytes", 1e300},
                                                          {"/model/chunk_bytes", "big"},
                                                          {"/sweep", nlohmann::json::object()},
                                                          {"/sweep/0", "point"},
                                                          {"/sweep/0/kvtier/gbps", "fast"},
                                                          {"/sweep/1/fio", 3},
                                                          {"/summary/gbps", nullptr},
                                                          {"/summary", "none"},
                                                          {"/verdict/break_even_tokens", -5},
                                                          {"/verdict/description", nullptr},
                                                          {"/repeat", "twice"},
                                                          {"/started_at", nlohmann::json::array()}}) {
    nlohmann::json m = d;
    m[nlohmann::json::json_pointer(ptr)] = value;
    docs.push_back(m.dump());
  }
  std::string nested = "{\"schema\": \"kvtier.bench.datapath/1\", \"target\": ";
  nested += std::string(100000, '[') + std::string(100000, ']') + "}";
  docs.push_back(nested);
  const std::string log = dir.path() + "/log";
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string path = dir.path() + "/bad" + std::to_string(i) + ".json";
    WriteText(path, docs[i]);
    const CliResult r = RunKvtier({"report", path, "--out", dir.path() + "/out", "--no-plots"}, log);
    ASSERT_TRUE(r.exited) << docs[i].substr(0, 200) << ": " << Describe(r);
    EXPECT_EQ(r.exit_code, 2) << docs[i].substr(0, 200) << ": " << Describe(r);
    EXPECT_TRUE(r.OneLine()) << docs[i].substr(0, 200) << ": " << r.output;
    EXPECT_EQ(r.output.rfind("kvtier report: ", 0), 0u) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out")) << "nothing written for bad input";
}

TEST(HostileReportInputs, NonRegularAndOversizeFilesAreRefusedWithoutReading) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string fifo = dir.path() + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string big = dir.path() + "/big.json";
  WriteSparse(big, static_cast<off_t>(kMaxJsonInputBytes) + 1);
  const std::string log = dir.path() + "/log";
  for (const std::string& path : {std::string("/dev/zero"), fifo, big, dir.path()}) {
    const CliResult r = RunKvtier({"report", path, "--out", dir.path() + "/out", "--no-plots"}, log);
    ASSERT_TRUE(r.exited) << path << ": " << Describe(r);
    EXPECT_EQ(r.exit_code, 2) << path << ": " << Describe(r);
    EXPECT_TRUE(r.OneLine()) << r.output;
    EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
  }
}

TEST(HostileReportInputs, ResultTitlesCannotInjectGnuplotCommands) {
  nlohmann::json d = ValidDatapath();
  d["target"]["url"] = "x'\nsystem('touch /tmp/kvtier-pwned')\n'";
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  WriteText(dir.path() + "/d.json", d.dump());
  auto in = LoadReportInputs({dir.path() + "/d.json"});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  for (const PlotSpec& p : ReportPlots(*in)) {
    const std::string script = GnuplotScript(p, p.name + ".svg");
    EXPECT_EQ(script.find("\nsystem("), std::string::npos) << script;
  }
}

TEST(HostileTraces, DevicesFifosAndHugeLinesAreRefusedInBoundedMemory) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string fifo = dir.path() + "/fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);  // no writer: a plain open would block forever
  const std::string long_line = dir.path() + "/long-line.jsonl";
  WriteSparse(long_line, 100 << 20);  // one 100 MB line
  const std::string huge = dir.path() + "/huge.jsonl";
  WriteSparse(huge, static_cast<off_t>(kMaxTraceFileBytes) + 1);
  const std::string many = dir.path() + "/long-json.jsonl";  // a real JSON line just over the limit
  WriteText(many, R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [)" +
                      std::string(kMaxTraceLineBytes, ' ') + "1]}\n");
  struct Case {
    std::string path, expect;
  };
  const std::vector<Case> cases = {{"/dev/zero", "character device"},
                                   {"/dev/null", "character device"},
                                   {fifo, "FIFO"},
                                   {dir.path(), "directory"},
                                   {long_line, "line longer than the limit"},
                                   {many, "line longer than the limit"},
                                   {huge, "larger than the limit"}};
  const std::string log = dir.path() + "/log";
  for (const Case& c : cases) {
    // 1 GiB of address space is far below what reading any of these whole would take.
    const CliResult r = RunKvtier({"replay", "--trace", c.path, "--model", "llama-3.1-8b"}, log);
    ASSERT_TRUE(r.exited) << c.path << ": " << Describe(r);
    EXPECT_EQ(r.exit_code, 1) << c.path << ": " << Describe(r);
    EXPECT_TRUE(r.OneLine()) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.path << ": " << r.output;
    EXPECT_NE(r.output.find(c.path), std::string::npos) << r.output;
  }
}

TEST(HostileTraces, RecordsOfTheWrongShapeOrRangeNameTheirLine) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string good = R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1]})";
  const std::vector<std::string> bad = {
      "[1, 2]", "\"text\"", "{", R"({"timestamp": "1", "input_length": 1, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": 1, "input_length": 18446744073709551615, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": 1, "input_length": 4294967297, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1e300, "hash_ids": [1]})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": {"0": 1}})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [4294967296]})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [-1]})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [[1]]})",
      R"({"timestamp": 1, "input_length": 1, "output_length": 1})",
      R"({"timestamp": 99999999999999999999, "input_length": 1, "output_length": 1, "hash_ids": [1]})",
  };
  const std::string path = dir.path() + "/t.jsonl";
  for (const std::string& line : bad) {
    WriteText(path, good + "\n" + line + "\n");
    auto t = LoadTrace(path, 512);
    ASSERT_FALSE(t.ok()) << line;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << line;
    EXPECT_NE(t.status().message().find(path + ":2: "), std::string::npos) << t.status().ToString();
  }
  WriteText(path, "\n\n");
  EXPECT_FALSE(LoadTrace(path, 512).ok()) << "a trace without requests";
  WriteText(path, good);  // a last line without a newline still counts
  ASSERT_TRUE(LoadTrace(path, 512).ok());
  EXPECT_FALSE(LoadTrace(path, 0).ok());
  EXPECT_FALSE(LoadTrace(path, kMaxBlockTokens + 1).ok());
}

TEST(HostileInputFile, LineReaderHoldsOneBoundedLineAtATime) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/lines";
  WriteText(path, "a\n\nbcd\n" + std::string(10, 'x') + "\n" + std::string(11, 'y') + "\nz");
  auto reader = LineReader::Open(path, 1 << 20, 10, "test file");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::string line;
  for (const char* want : {"a", "", "bcd", "xxxxxxxxxx"}) {
    auto more = reader->Next(&line);
    ASSERT_TRUE(more.ok() && *more) << want;
    EXPECT_EQ(line, want);
  }
  auto too_long = reader->Next(&line);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find(path + ":5: line longer"), std::string::npos)
      << too_long.status().ToString();
  // The whole-file bound holds while reading, not only at open.
  auto small = LineReader::Open(path, 8, 100, "test file");
  ASSERT_FALSE(small.ok()) << "larger than the limit at open";
  auto whole = ReadBoundedFile(path, 1 << 20, "test file");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), std::filesystem::file_size(path));
  EXPECT_FALSE(ReadBoundedFile(path, whole->size() - 1, "test file").ok());
  EXPECT_EQ(ReadBoundedFile(dir.path() + "/missing", 10, "test file").status().code(), Code::kNotFound);
  EXPECT_FALSE(ReadBoundedFile("/dev/zero", 1 << 20, "test file").ok());
  // A link is refused, never followed (issue 23: one opener, the rules of key_file=).
  std::filesystem::create_symlink(path, dir.path() + "/link");
  auto linked = ReadBoundedFile(dir.path() + "/link", 1 << 20, "test file");
  EXPECT_EQ(linked.status().code(), Code::kInvalidArgument) << linked.status().ToString();
}

TEST(HostileFioOutput, WrongShapesAreErrorsNeverThrown) {
  const std::vector<std::string> texts = {
      "", "no json here", "{", "[]", "{\"jobs\": 5}", "{\"jobs\": []}", "{\"jobs\": [5]}",
      "{\"jobs\": [{\"read\": 5}]}", "{\"jobs\": [{\"read\": {\"bw_bytes\": \"fast\"}}]}",
      R"({"jobs": [{"read": {"bw_bytes": 1e9, "io_bytes": -5, "runtime": "x"}}]})",
      R"({"jobs": [{"read": {"bw_bytes": 1e9, "io_bytes": 1e300, "clat_ns": 5}}]})",
      R"({"jobs": [{"read": {"bw_bytes": 1e9, "io_bytes": 100, "clat_ns": {"percentile": []}},
                   "job options": {"ioengine": 5, "iodepth": "99999999999999"}}]})",
  };
  for (const std::string& t : texts) {
    Result<FioResult> r = Status::Internal("not run");
    ASSERT_NO_THROW(r = ParseFioJson(t)) << t;
    if (r.ok()) {
      EXPECT_GT(r->bytes, 0u) << t;
      EXPECT_GT(r->bytes_per_second, 0) << t;
    }
  }
  auto ok = ParseFioJson(R"({"jobs": [{"read": {"bw_bytes": 1e9, "io_bytes": 100, "runtime": 1000,
      "clat_ns": {"percentile": {"50.000000": 2000, "99.000000": 4000}}},
      "job options": {"ioengine": "io_uring", "iodepth": "4"}}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->iodepth, 4u);
  EXPECT_DOUBLE_EQ(ok->p99_us, 4.0);
}

}  // namespace
}  // namespace kvtier::internal
