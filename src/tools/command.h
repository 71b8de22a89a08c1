// The kvtier command-line tool is a set of subcommands, each in its own cmd_*.cc file, registered with
// a static KVTIER_COMMAND(...) registrar (the files are compiled straight into the executable, so the
// registrars are never dropped by the linker).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace kvtier::tools {

// Adds options to `cmd` and returns the action to run when it is chosen; the action's return value is
// the process exit status.
using CommandSetup = std::function<std::function<int()>(CLI::App& cmd)>;

struct CommandSpec {
  std::string group;        // "" for a top-level command, e.g. "bench" for `kvtier bench e2e`
  std::string name;         // "inspect"
  std::string description;  // one line for --help
  CommandSetup setup;
};

bool RegisterCommand(CommandSpec spec);

// Builds the CLI app with every registered command and runs it; returns the exit status.
int RunCli(int argc, char** argv);

}  // namespace kvtier::tools

#define KVTIER_TOOLS_CONCAT_INNER_(a, b) a##b
#define KVTIER_TOOLS_CONCAT_(a, b) KVTIER_TOOLS_CONCAT_INNER_(a, b)
#define KVTIER_COMMAND(...)                                                            \
  static const bool KVTIER_TOOLS_CONCAT_(kvtier_command_registered_, __COUNTER__) =       \
      ::kvtier::tools::RegisterCommand(::kvtier::tools::CommandSpec{__VA_ARGS__})
