// The `reckon` command line: one binary, subcommands that read like the pipeline. Each
// subcommand lives in its own tools/cmd_*.cpp and registers itself (command.h).
#include <cstdio>

#include "command.h"
#include "reckon/core/error.h"

namespace reckon::tools {
std::vector<Setup>& commands() {
  static std::vector<Setup> c;
  return c;
}
}  // namespace reckon::tools

int main(int argc, char** argv) {
  CLI::App app{"reckon: train convolutional networks and know what they cost"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, reckon::tools::Runner>> subs;
  for (auto& setup : reckon::tools::commands()) {
    CLI::App* sub = nullptr;
    auto run = setup(app, sub);
    subs.push_back({sub, std::move(run)});
  }
  // Usage errors (unknown options, bad values, a missing argument) exit 2, as the design says; CLI11
  // prints them. --help is not an error.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, run] : subs)
      if (sub && sub->parsed()) return run();
  } catch (const reckon::Error& e) {
    std::fprintf(stderr, "reckon: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reckon: %s\n", e.what());
    return 1;
  }
  return 0;
}
