#include "core/host_identity.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "core/input_file.h"

namespace kvtier::internal {

std::string HostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string BootId() {
  auto id = ReadBoundedFile("/proc/sys/kernel/random/boot_id", 4096, "boot id");
  if (!id.ok()) return "unknown";
  std::string s = *id;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string PidNamespace() {
  char buf[128];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool ProcessIsGone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace kvtier::internal
