// Runs the built `kvtier` binary as a user would, with its output captured, under an address-space
// limit (so a command that reads without bound fails instead of eating the machine) and an alarm
// (so a command that blocks forever is killed and the test fails, rather than hanging the suite).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvtier::hostile {

// Sanitizer runtimes reserve terabytes of address space: no RLIMIT_AS there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kCanLimitMemory = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kCanLimitMemory = false;
#else
inline constexpr bool kCanLimitMemory = true;
#endif
#else
inline constexpr bool kCanLimitMemory = true;
#endif

struct CliResult {
  bool exited = false;  // false: killed by a signal (an abort, the memory limit, the alarm)
  int exit_code = -1;
  int signal = 0;
  std::string output;   // stdout and stderr together

  // The output is exactly one line.
  bool OneLine() const {
    return !output.empty() && output.back() == '\n' && output.find('\n') == output.size() - 1;
  }
};

// `kvtier ARGS...` with stdout+stderr in `log`; the child's address space is limited to
// `memory_limit` bytes (where the build allows) and it is killed after `alarm_s` seconds.
inline CliResult RunKvtier(const std::vector<std::string>& args, const std::string& log,
                           rlim_t memory_limit = rlim_t{1} << 30, unsigned alarm_s = 120) {
  std::vector<std::string> all = {KVTIER_CLI_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  CliResult r;
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    if (kCanLimitMemory) {
      const struct rlimit lim = {memory_limit, memory_limit};
      if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(126);
    }
    ::alarm(alarm_s);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (pid < 0) return r;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

inline std::string Describe(const CliResult& r) {
  return (r.exited ? "exit " + std::to_string(r.exit_code) : "signal " + std::to_string(r.signal)) +
         ", output: " + r.output;
}

}  // namespace kvtier::hostile
