#include "eval/benchlib/fio_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

bool HasArg(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

TEST(FioRunnerTest, IodepthMatchesBytesInFlight) {
  EXPECT_EQ(IodepthFor(256ull << 20, 32ull << 20), 8u);
  EXPECT_EQ(IodepthFor(32ull << 20, 32ull << 20), 1u);
  EXPECT_EQ(IodepthFor(1ull << 20, 32ull << 20), 1u);  // never zero
  EXPECT_EQ(IodepthFor(64ull << 20, 2ull << 20), 32u);
  EXPECT_EQ(IodepthFor(100, 0), 1u);
}

TEST(FioRunnerTest, InvocationReadsTheGivenFilesReadOnlyWithDirectIoAndDepth) {
  FioJob job;
  job.files = {"/nvme/kv:pool/a", "/nvme/b"};
  job.link_dir = "/nvme/kv:pool/links";
  job.block_size = (32ull << 20) + 4096;
  job.iodepth = 8;
  job.output_path = "/tmp/out.json";
  auto argv = BuildFioArgs(job);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  EXPECT_EQ((*argv)[0], "fio");
  for (const char* want :
       {"--opendir=/nvme/kv\\:pool/links", "--readonly", "--rw=read", "--bs=33558528", "--iodepth=8",
        "--ioengine=io_uring", "--direct=1", "--output-format=json", "--output=/tmp/out.json",
        "--group_reporting"}) {
    EXPECT_TRUE(HasArg(*argv, want)) << "missing " << want << " in " << ShellJoin(*argv);
  }
  for (const std::string& a : *argv) {
    EXPECT_EQ(a.rfind("--iomem", 0), std::string::npos) << "no huge-page directory was given: " << a;
    EXPECT_EQ(a.rfind("--directory", 0), std::string::npos) << "fio must not lay out files of its own: " << a;
  }
  EXPECT_EQ(FioMemoryText(job), "4 KiB pages");
  job.direct = false;
  job.ioengine = "libaio";
  job.hugepage_dir = "/mnt/huge";
  argv = BuildFioArgs(job);
  ASSERT_TRUE(argv.ok());
  EXPECT_TRUE(HasArg(*argv, "--direct=0"));
  EXPECT_TRUE(HasArg(*argv, "--ioengine=libaio"));
  EXPECT_TRUE(HasArg(*argv, "--iomem=mmaphuge:/mnt/huge/kvtier-fio." + std::to_string(getpid())));
  EXPECT_EQ(FioMemoryText(job), "huge pages (hugetlbfs at /mnt/huge)");
}

TEST(FioRunnerTest, InvocationRejectsMissingFields) {
  FioJob job;
  job.block_size = 4096;
  EXPECT_EQ(BuildFioArgs(job).status().code(), Code::kInvalidArgument);  // no files
  job.files = {"/d/a"};
  EXPECT_EQ(BuildFioArgs(job).status().code(), Code::kInvalidArgument);  // no link directory
  job.link_dir = "/d/links";
  job.iodepth = 0;
  EXPECT_EQ(BuildFioArgs(job).status().code(), Code::kInvalidArgument);
  job.iodepth = 1;
  job.block_size = 0;
  EXPECT_EQ(BuildFioArgs(job).status().code(), Code::kInvalidArgument);
}

// Asking for more free huge pages than any machine has finds no directory.
TEST(FioRunnerTest, HugePageDirNeedsEnoughFreePages) {
  EXPECT_EQ(HugePageDirFor(uint64_t{1} << 62), "");
}

TEST(FioRunnerTest, ShellJoinQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(ShellJoin({"fio", "--bs=4096", "--directory=/a b", "it's"}),
            "fio --bs=4096 '--directory=/a b' 'it'\\''s'");
}

constexpr const char* kFioJson = R"(fio: some warning before the JSON
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "kvtier-reference",
      "job options" : { "ioengine" : "io_uring", "iodepth" : "8" },
      "read" : {
        "io_bytes" : 4294967296, "bw_bytes" : 2147483648, "runtime" : 2000,
        "clat_ns" : { "percentile" : { "50.000000" : 120586240, "99.000000" : 200278016 } }
      }
    }
  ]
})";

TEST(FioRunnerTest, ParsesBandwidthAndPercentiles) {
  auto r = ParseFioJson(kFioJson);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 2147483648.0);
  EXPECT_EQ(r->bytes, 4294967296ull);
  EXPECT_DOUBLE_EQ(r->seconds, 2.0);
  EXPECT_DOUBLE_EQ(r->p50_us, 120586.24);
  EXPECT_DOUBLE_EQ(r->p99_us, 200278.016);
  EXPECT_EQ(r->ioengine, "io_uring");
  EXPECT_EQ(r->iodepth, 8u);
}

TEST(FioRunnerTest, ParseRejectsGarbage) {
  EXPECT_EQ(ParseFioJson("no json here").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseFioJson("{ broken").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseFioJson(R"({"jobs": []})").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseFioJson(R"({"jobs": [{"read": {"io_bytes": 0, "bw_bytes": 0}}]})").status().code(),
            Code::kInvalidArgument);
}

// Runs the real fio on a few small buffered files: checks the command line is one fio accepts.
// A small fio job in `dir` that any filesystem takes: 256 KiB requests, psync, buffered.
FioJob SmallJob(const std::filesystem::path& dir, const std::string& folder) {
  FioJob job;
  job.link_dir = (dir / folder).string();
  job.block_size = 256 << 10;
  job.iodepth = 2;
  job.ioengine = "psync";
  job.direct = false;  // the temp directory may be on a filesystem without O_DIRECT
  job.output_path = (dir / "fio.json").string();
  return job;
}

TEST(FioRunnerTest, RealFioAcceptsTheInvocation) {
  if (!FioAvailable()) GTEST_SKIP() << "fio is not installed";
  char tmpl[] = "/tmp/kvtier-fio-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  FioJob job = SmallJob(dir, "links");
  for (int i = 0; i < 4; ++i) {
    const std::string f = (dir / ("chunk" + std::to_string(i))).string();
    std::ofstream(f, std::ios::binary) << std::string(256 << 10, static_cast<char>('a' + i));
    job.files.push_back(f);
  }
  auto r = RunFio(job);
  for (int i = 0; i < 4; ++i) {  // read, never written
    std::ifstream in(job.files[i], std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, std::string(256 << 10, static_cast<char>('a' + i))) << job.files[i];
  }
  EXPECT_TRUE(std::filesystem::is_empty(job.link_dir)) << "the links are removed";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, 4u * (256 << 10));
  EXPECT_EQ(r->memory, "4 KiB pages");
  EXPECT_GT(r->bytes_per_second, 0);
  EXPECT_NE(r->command.find("--bs=262144"), std::string::npos);
}

// A write job writes files of its own (one request each) in its folder and removes them; it never
// reads or opens the tier's files.
TEST(FioRunnerTest, WriteInvocationWritesFilesOfItsOwnAndRemovesThem) {
  FioJob job;
  job.write = true;
  job.write_files = 16;
  job.link_dir = "/nvme/kv:pool/fio-write";
  job.block_size = (32ull << 20) + 4096;
  job.iodepth = 4;
  auto argv = BuildFioArgs(job);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  for (const char* want : {"--directory=/nvme/kv\\:pool/fio-write", "--nrfiles=16", "--filesize=33558528",
                           "--rw=write", "--unlink=1", "--bs=33558528", "--iodepth=4", "--direct=1"}) {
    EXPECT_TRUE(HasArg(*argv, want)) << "missing " << want << " in " << ShellJoin(*argv);
  }
  for (const std::string& a : *argv) {
    EXPECT_NE(a, "--readonly");
    EXPECT_EQ(a.rfind("--opendir", 0), std::string::npos) << a;
  }
  job.write_files = 0;
  EXPECT_EQ(BuildFioArgs(job).status().code(), Code::kInvalidArgument);
}

TEST(FioRunnerTest, ParsesTheWriteFiguresOfAWriteJob) {
  constexpr const char* json = R"({"jobs": [{"job options": {"iodepth": "2"},
      "read": {"io_bytes": 0, "bw_bytes": 0},
      "write": {"io_bytes": 1048576, "bw_bytes": 524288, "runtime": 2000}}]})";
  auto w = ParseFioJson(json, /*write=*/true);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_DOUBLE_EQ(w->bytes_per_second, 524288.0);
  EXPECT_EQ(w->bytes, 1048576u);
  EXPECT_EQ(ParseFioJson(json).status().code(), Code::kInvalidArgument);  // it read nothing
  EXPECT_EQ(ParseFioJson(kFioJson, /*write=*/true).status().code(), Code::kCorruption);  // no write job
}

// The real fio writes as many files as asked, and none is left afterwards.
TEST(FioRunnerTest, RealFioWritesAndRemovesItsFiles) {
  if (!FioAvailable()) GTEST_SKIP() << "fio is not installed";
  char tmpl[] = "/tmp/kvtier-fio-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  FioJob job = SmallJob(dir, "fio-write");
  job.write = true;
  job.write_files = 4;
  auto r = RunFio(job);
  const bool left = std::filesystem::exists(job.link_dir) && !std::filesystem::is_empty(job.link_dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, 4u * (256 << 10));
  EXPECT_FALSE(left) << "fio's files are removed";
}

// The dd fallback reads every file whole, `depth` at a time, and fails when a file is missing.
TEST(FioRunnerTest, DdReferenceReadsEveryFile) {
  if (!DdAvailable()) GTEST_SKIP() << "dd is not installed";
  char tmpl[] = "/tmp/kvtier-dd-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back((dir / ("f" + std::to_string(i))).string());
    FILE* f = std::fopen(files.back().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::vector<char> bytes(256 << 10, 'x');
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  auto r = RunDdReference(files, 128 << 10, 2);
  auto missing = RunDdReference({(dir / "absent").string()}, 128 << 10, 1);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, 3u * (256 << 10));
  EXPECT_EQ(r->iodepth, 2u);
  EXPECT_EQ(r->ioengine, "dd");
  EXPECT_GT(r->bytes_per_second, 0);
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(RunDdReference({}, 4096, 1).ok());
}

}  // namespace
}  // namespace kvtier::internal
