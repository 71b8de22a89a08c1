// Running an external tool (fio, gnuplot) of the bench: spawn, wait, map the outcome to a Status.
// Thread-safe (no shared state); blocks until the child exits.
#pragma once

#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

// True when `name` is an executable file in a PATH directory.
bool OnPath(const std::string& name);

// Runs argv[0] (searched on PATH) with `argv` in directory `cwd` (empty: this process's), with
// stdin, stdout and stderr inherited or, when `log_path` is set, stdout and stderr written to that new
// file, and waits. IOError naming the command when it cannot start, is killed or exits non-zero.
Status RunProcess(const std::vector<std::string>& argv, const std::string& cwd = "",
                  const std::string& log_path = "");

}  // namespace kvtier::internal
