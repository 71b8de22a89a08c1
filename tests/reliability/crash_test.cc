// Crash cycles: a child process saves to file:// and fs:// tiers in a tight loop and is killed with
// SIGKILL at a random moment; then the tiers are reopened here and checked:
//   - every visible chunk reads back verified and holds exactly the bytes that were saved;
//   - leftovers of interrupted writes are gone (file:// at open, fs:// after gc);
//   - file://'s index matches the files on disk, and its usage stays within capacity.
// Cycles: KVTIER_CRASH_CYCLES, else 30 x KVTIER_TEST_SCALE.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tiers/fs/pool_gc.h"
#include "kvtier/tier.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

std::string WriterPath() {
  if (const char* d = std::getenv("KVTIER_BIN_DIR")) {
    return std::string(d) + "/tests/reliability/kvtier_crash_writer";
  }
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kvtier_crash_writer";
}

size_t Cycles() {
  if (const char* c = std::getenv("KVTIER_CRASH_CYCLES")) return std::strtoull(c, nullptr, 10);
  return Scaled(30, 5);
}

// Starts the writer, waits until it has opened its tiers, lets it run `run_for`, kills it.
// Returns false (with a test failure) when the writer could not be started or died on its own.
bool RunAndKill(const std::vector<std::string>& args, std::chrono::microseconds run_for) {
  int out[2];
  if (pipe(out) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  char buf[16] = {};
  const ssize_t n = read(out[0], buf, sizeof(buf) - 1);  // "ready\n" once the tiers are open
  close(out[0]);
  EXPECT_GT(n, 0) << "crash writer did not start: " << args[0];
  if (n > 0) std::this_thread::sleep_for(run_for);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "crash writer exited by itself, status " << status;
  return n > 0;
}

struct CycleFigures {
  uint64_t chunks_verified = 0;
  uint64_t temps_seen = 0;  // leftovers of interrupted writes found and removed
  size_t last_listed = 0;   // chunks the last checked tier listed
};

// Reopens one tier and checks every visible chunk against the payload it must hold.
// `indexed`: the tier keeps an index (file://) whose chunk count must match its listing; fs:// keeps
// none (its usage figures come from the last gc scan).
void CheckTier(const std::string& url, uint64_t capacity, bool indexed, CycleFigures* fig) {
  auto opened = OpenTier(url);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Tier& tier = **opened;
  std::vector<ChunkInfo> listed;
  ASSERT_TRUE(tier.List([&](const ChunkInfo& c) {
                    listed.push_back(c);
                    return true;
                  }).ok());
  const size_t bytes = SmallLayout().BytesPerChunk();
  std::vector<std::byte> got(bytes);
  const std::span<std::byte> piece(got);
  for (const ChunkInfo& info : listed) {
    ChunkId id = info.id;
    if (id.layout_fingerprint == 0) id.layout_fingerprint = SmallLayout().Fingerprint();
    const Status s = tier.Get(id, ScatterList(&piece, 1));
    ASSERT_TRUE(s.ok()) << url << " lists " << id.key.Hex() << " but it does not read back: "
                        << s.ToString();
    ASSERT_TRUE(got == PayloadFor(id, bytes)) << url << ": wrong bytes for " << id.key.Hex();
    ++fig->chunks_verified;
  }
  const TierStats st = tier.Stats();
  EXPECT_EQ(st.corrupt, 0u) << url;
  if (capacity > 0) {
    EXPECT_LE(st.usage_bytes, capacity) << url;
  }
  if (indexed) {
    EXPECT_EQ(st.chunks, listed.size()) << url << ": index and listing disagree";
  }
  fig->last_listed = listed.size();
}

TEST(CrashCycles, KilledWriterLeavesOnlyVerifiedChunks) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const uint64_t capacity = 256 * 1024;  // ~32 chunks of 8 KiB on disk: evictions run constantly
  const std::string file_dir = dir.path() + "/file";
  const std::string pool = dir.path() + "/pool";
  const std::string file_url = "file://" + file_dir + "?capacity=" + std::to_string(capacity);
  const std::string fs_url = "fs://" + pool;
  for (const auto& u : {file_url, fs_url}) {
    auto t = OpenTier(u);
    if (!t.ok() && t.status().code() == Code::kInvalidArgument) GTEST_SKIP() << t.status().ToString();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
  }
  const size_t cycles = Cycles();
  std::mt19937_64 rng(20261129);
  CycleFigures fig;
  for (size_t c = 0; c < cycles; ++c) {
    SCOPED_TRACE("cycle " + std::to_string(c));
    const auto run_for = std::chrono::microseconds(rng() % 40000);
    ASSERT_TRUE(RunAndKill({WriterPath(), std::to_string(rng()), file_url, fs_url}, run_for));
    // file:// removes leftovers when it opens; count what a fresh open must remove.
    fig.temps_seen += FilesUnder(file_dir, IsTempName).size();
    ASSERT_NO_FATAL_FAILURE(CheckTier(file_url, capacity, /*indexed=*/true, &fig));
    // The index matches the files: one published file per listed chunk, nothing else.
    EXPECT_EQ(FilesUnder(file_dir, IsChunkName).size(), fig.last_listed);
    EXPECT_TRUE(FilesUnder(file_dir, IsTempName).empty()) << "file:// kept temporaries after open";
    ASSERT_NO_FATAL_FAILURE(CheckTier(fs_url, 0, /*indexed=*/false, &fig));
    // fs:// leaves temporaries to gc (a live writer on another host may own them); the writer is
    // dead, so a gc with no grace period must remove every one.
    const size_t pool_temps = FilesUnder(pool, IsTempName).size();
    internal::GcOptions gc;
    gc.grace = std::chrono::seconds(0);
    gc.max_bytes = 1ull << 40;
    auto report = internal::CollectPoolGarbage(pool, gc);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->temps_removed, pool_temps);
    EXPECT_EQ(report->chunks_after, FilesUnder(pool, IsChunkName).size());
    fig.temps_seen += pool_temps;
    EXPECT_TRUE(FilesUnder(pool, IsTempName).empty()) << "gc left temporaries in the pool";
    uint64_t on_disk = 0;
    for (const auto& f : FilesUnder(file_dir, IsChunkName)) on_disk += std::filesystem::file_size(f);
    EXPECT_LE(on_disk, capacity) << "file:// chunk files larger than capacity";
  }
  std::printf("[reliability] crash cycles survived: %zu; chunks verified after reopen: %llu; "
              "leftover temporaries removed: %llu\n",
              cycles, static_cast<unsigned long long>(fig.chunks_verified),
              static_cast<unsigned long long>(fig.temps_seen));
}

}  // namespace
}  // namespace kvtier::reltest
