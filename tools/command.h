// Subcommands of the `reckon` binary register themselves here, one file per subcommand
// (tools/cmd_*.cpp): setup adds the CLI11 subcommand and its options and returns a runner
// that is called when the user picked it. Errors: throw reckon::Error; main prints it on
// one line and exits with status 1.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace reckon::tools {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& app, CLI::App*& sub)>;

std::vector<Setup>& commands();
struct RegisterCommand {
  explicit RegisterCommand(Setup s) { commands().push_back(std::move(s)); }
};

}  // namespace reckon::tools
