// Starts helper processes for the multi-process fs:// tests (posix_spawn: safe from a threaded test
// process) and collects their exit status and output.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace kvtier::fstest {

struct Child {
  pid_t pid = -1;
  std::string output_path;
};

// Runs `args` (args[0] is the program) with stdout and stderr sent to `output_path`.
// pid -1 when the process could not be started.
inline Child Spawn(const std::vector<std::string>& args, const std::string& output_path) {
  Child c;
  c.output_path = output_path;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (posix_spawn(&c.pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return c;
}

struct ChildResult {
  bool exited = false;  // false: killed by a signal (a crash) or never started
  int exit_code = -1;
  std::string output;
};

inline ChildResult Wait(const Child& c) {
  ChildResult r;
  if (c.pid <= 0) return r;
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  std::ifstream in(c.output_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

// The number after "name=" in a worker's summary line; -1 when absent.
inline long long Field(const std::string& output, const std::string& name) {
  const size_t at = output.find(" " + name + "=");
  if (at == std::string::npos) return -1;
  return std::stoll(output.substr(at + name.size() + 2));
}

}  // namespace kvtier::fstest
