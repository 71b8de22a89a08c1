// Who this process is, as seen by a later run on the same or another host: used to tell a dead local
// process's leftovers (temporaries, work folders) from a live or remote one's. Thread-safe.
#pragma once

#include <sys/types.h>

#include <string>

namespace kvtier::internal {

std::string HostName();      // gethostname(), or "unknown"
std::string BootId();        // this boot's random id (/proc/sys/kernel/random/boot_id), or "unknown"
std::string PidNamespace();  // "pid:[inode]" of this process's pid namespace, or ""
// True only when no process `pid` exists in this pid namespace (kill(pid, 0) says ESRCH).
bool ProcessIsGone(pid_t pid);

}  // namespace kvtier::internal
