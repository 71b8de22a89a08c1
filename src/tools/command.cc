#include "tools/command.h"

#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <system_error>
#include <vector>

namespace kvtier::tools {
namespace {

std::vector<CommandSpec>& Specs() {
  static std::vector<CommandSpec> specs;
  return specs;
}

}  // namespace

bool RegisterCommand(CommandSpec spec) {
  Specs().push_back(std::move(spec));
  return true;
}

int RunCli(int argc, char** argv) {
  CLI::App app{"kvtier: a tiered store for the attention KV cache of LLM inference"};
  app.require_subcommand(1);
  std::map<std::string, CLI::App*> groups;
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (const CommandSpec& spec : Specs()) {
    CLI::App* parent = &app;
    if (!spec.group.empty()) {
      auto it = groups.find(spec.group);
      if (it == groups.end()) {
        CLI::App* g = app.add_subcommand(spec.group, spec.group + " commands");
        g->require_subcommand(1);
        it = groups.emplace(spec.group, g).first;
      }
      parent = it->second;
    }
    CLI::App* cmd = parent->add_subcommand(spec.name, spec.description);
    actions.emplace_back(cmd, spec.setup(*cmd));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [cmd, action] : actions) {
    if (!cmd->parsed()) continue;
    // A resource failure is an error, never an abort: memory running out under a limit (ulimit -v,
    // a cgroup) ends the command with a message and exit 1 rather than SIGABRT (exit 134). Inputs
    // are parsed within stated bounds (docs/security.md); this is the backstop for what a command
    // then builds from them.
    try {
      return action();
    } catch (const std::bad_alloc&) {
      std::cerr << "kvtier " << cmd->get_name() << ": out of memory (the input needs more memory than this "
                << "process may use; see the size limits in docs/security.md)\n";
      return 1;
    } catch (const std::system_error& e) {
      std::cerr << "kvtier " << cmd->get_name() << ": " << e.what() << "\n";
      return 1;
    }
  }
  return 2;
}

}  // namespace kvtier::tools
