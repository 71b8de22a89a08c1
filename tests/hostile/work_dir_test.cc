// "A killed bench leaves no work folder behind after its next run": work folders carry a marker naming
// their process; the next run removes the folders of dead runs that carry kvtier's marker, and never
// anything else (unmarked folders, live runs, other hosts, links, foreign markers).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/input_file.h"
#include "core/work_dir.h"
#include "hostile/cli_runner.h"
#include "support/temp_dir.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
using hostile::CliResult;
using hostile::Describe;
using hostile::RunKvtier;

std::string Host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string Boot() {
  auto id = ReadBoundedFile("/proc/sys/kernel/random/boot_id", 4096, "boot id");
  std::string s = id.ok() ? *id : "unknown";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Field 22 of /proc/PID/stat, read independently of the code under test.
uint64_t StartTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(all.substr(all.rfind(')') + 1));
  std::string f;
  for (int i = 3; i <= 22; ++i) rest >> f;
  return std::stoull(f);
}

// The pid of a process that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// The marker format, written by hand (not by the code under test).
std::string Marker(const std::string& host, pid_t pid, uint64_t start, const std::string& boot = Boot()) {
  return "kvtier work folder v1\nhost " + host + "\nboot " + boot + "\npid " + std::to_string(pid) +
         "\nstart " + std::to_string(start) + "\n";
}

// PARENT/NAME holding a marker (unless empty) and some files a run would leave.
std::string MakeFolder(const std::string& parent, const std::string& name, const std::string& marker) {
  const std::string dir = parent + "/" + name;
  fs::create_directories(dir + "/tier/00");
  std::ofstream(dir + "/tier/00/chunk.kvc") << "payload";
  if (!marker.empty()) std::ofstream(dir + "/" + kWorkMarkerName) << marker;
  return dir;
}

TEST(HostileWorkDirs, OnlyMarkedFoldersOfDeadRunsAreRemoved) {
  testing::TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  const std::string parent = tmp.path() + "/work";
  const std::string outside = tmp.path() + "/outside.txt";
  std::ofstream(outside) << "a user's file";
  const pid_t self = ::getpid();
  const std::string dead = MakeFolder(parent, "kvtier-bench.1.aaaaaa", Marker(Host(), DeadPid(), 1));
  fs::create_symlink(outside, dead + "/link-out");          // removed as a link, never followed
  fs::create_symlink(tmp.path(), dead + "/tier/link-dir");
  const std::string reused = MakeFolder(parent, "kvtier-bench.2.bbbbbb", Marker(Host(), self, 1));
  const std::string rebooted =
      MakeFolder(parent, "kvtier-bench.3.cccccc", Marker(Host(), self, StartTicks(self), "another-boot"));
  // Kept: unmarked, live, another host, garbage marker, marker that is a link, other prefix, a link
  // to a dead folder elsewhere, a file with the prefix.
  const std::string unmarked = MakeFolder(parent, "kvtier-bench.4.dddddd", "");
  const std::string live = MakeFolder(parent, "kvtier-bench.5.eeeeee", Marker(Host(), self, StartTicks(self)));
  const std::string other_host = MakeFolder(parent, "kvtier-bench.6.ffffff", Marker("other-host", DeadPid(), 1));
  const std::string garbage = MakeFolder(parent, "kvtier-bench.7.gggggg", "kvtier work folder v1\npid x\n");
  const std::string link_marker = MakeFolder(parent, "kvtier-bench.8.hhhhhh", "");
  std::ofstream(tmp.path() + "/real-marker") << Marker(Host(), DeadPid(), 1);
  fs::create_symlink(tmp.path() + "/real-marker", link_marker + "/" + kWorkMarkerName);
  const std::string other_prefix = MakeFolder(parent, "kvtier-replay.9.iiiiii", Marker(Host(), DeadPid(), 1));
  const std::string elsewhere = MakeFolder(tmp.path(), "elsewhere", Marker(Host(), DeadPid(), 1));
  fs::create_symlink(elsewhere, parent + "/kvtier-bench.10.jjjjjj");
  std::ofstream(parent + "/kvtier-bench.11.kkkkkk") << "a file, not a folder";

  auto removed = RemoveDeadWorkDirs(parent, "kvtier-bench");
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 3u);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(reused)) << "same pid, another start time: the pid was reused";
  EXPECT_FALSE(fs::exists(rebooted));
  for (const std::string& kept : {unmarked, live, other_host, garbage, link_marker, other_prefix,
                                  elsewhere + "/tier/00/chunk.kvc", parent + "/kvtier-bench.11.kkkkkk",
                                  outside, tmp.path() + "/real-marker"}) {
    EXPECT_TRUE(fs::exists(kept)) << kept;
  }
  EXPECT_TRUE(fs::is_symlink(parent + "/kvtier-bench.10.jjjjjj"));
  EXPECT_EQ(*RemoveDeadWorkDirs(tmp.path() + "/no-such-dir", "kvtier-bench"), 0u);
}

TEST(HostileWorkDirs, AWorkDirIsMarkedRemovedAtTheEndAndKeptOnRequest) {
  testing::TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  std::string path;
  {
    auto dir = WorkDir::Create(tmp.path() + "/new/parent", "kvtier-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    path = dir->path();
    EXPECT_EQ(fs::path(path).filename().string().rfind("kvtier-test." + std::to_string(::getpid()) + ".", 0), 0u);
    std::ifstream in(path + "/" + kWorkMarkerName);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, Marker(Host(), ::getpid(), StartTicks(::getpid())));
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // A live run's folder survives another run's cleanup.
    EXPECT_EQ(*RemoveDeadWorkDirs(tmp.path() + "/new/parent", "kvtier-test"), 0u);
    EXPECT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
  {
    auto dir = WorkDir::Create(tmp.path(), "kvtier-test");
    ASSERT_TRUE(dir.ok());
    path = dir->path();
    dir->Keep();
  }
  EXPECT_TRUE(fs::exists(path)) << "kept for the user";
  EXPECT_FALSE(fs::exists(path + "/" + kWorkMarkerName)) << "and no later run removes it";
}

// The commands themselves: a folder left by a killed run (faked with a dead pid) is gone after the
// next run in the same place, and a folder without the marker is kept.
TEST(HostileWorkDirs, TheNextReplayAndBenchRemoveAKilledRunsFolder) {
  testing::TempDir tmp;
  ASSERT_TRUE(tmp.ok());
  const std::string trace = tmp.path() + "/t.jsonl";
  {
    std::ofstream out(trace);
    for (int i = 0; i < 4; ++i) {
      out << R"({"timestamp": )" << i << R"(, "input_length": 512, "output_length": 1, "hash_ids": [)"
          << i % 2 << "]}\n";
    }
  }
  struct Run {
    std::string prefix;
    std::vector<std::string> args;
  };
  const std::string cache = tmp.path() + "/cache";
  const std::string bench = tmp.path() + "/bench";
  const std::vector<Run> runs = {
      {"kvtier-replay",
       {"replay", "--trace", trace, "--model", "qwen2.5-0.5b", "--tiers",
        "mem://?capacity=1ktokens,file://" + cache + "?capacity=1Mtokens"}},
      {"kvtier-bench",
       {"bench", "datapath", "--target", "file://" + bench, "--model", "qwen2.5-0.5b", "--chunk-tokens",
        "16", "--total", "1MiB", "--no-fio", "--no-serial", "--context-tokens",
        "1024"}},
  };
  for (const Run& run : runs) {
    const std::string parent = run.prefix == "kvtier-replay" ? cache : bench;
    const std::string killed = MakeFolder(parent, run.prefix + ".1.zzzzzz", Marker(Host(), DeadPid(), 1));
    const std::string unmarked = MakeFolder(parent, run.prefix + ".2.yyyyyy", "");
    const CliResult r = RunKvtier(run.args, tmp.path() + "/log", rlim_t{8} << 30);
    ASSERT_TRUE(r.exited && r.exit_code == 0) << run.prefix << ": " << Describe(r);
    EXPECT_FALSE(fs::exists(killed)) << run.prefix;
    EXPECT_TRUE(fs::exists(unmarked + "/tier/00/chunk.kvc")) << run.prefix;
    size_t left = 0;
    for (const auto& e : fs::directory_iterator(parent)) left += e.path() != unmarked;
    EXPECT_EQ(left, 0u) << run.prefix << ": the run removed its own folder too";
  }
}

}  // namespace
}  // namespace kvtier::internal
