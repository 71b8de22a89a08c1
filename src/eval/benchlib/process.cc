#include "eval/benchlib/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

extern char** environ;

namespace kvtier::internal {

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

Status RunProcess(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log_path) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, cargs[0], &actions, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return Status::FromErrno(err, "start " + argv[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "wait for " + argv[0]);
  }
  if (WIFSIGNALED(wstatus)) {
    return Status::IOError(argv[0] + " was killed by signal " + std::to_string(WTERMSIG(wstatus)));
  }
  if (WEXITSTATUS(wstatus) != 0) {
    return Status::IOError(argv[0] + " failed with exit status " +
                           std::to_string(WEXITSTATUS(wstatus)));
  }
  return Status::OK();
}

}  // namespace kvtier::internal
