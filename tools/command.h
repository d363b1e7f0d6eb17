// Subcommands of the `reckon` binary register themselves here, one file per subcommand
// (tools/cmd_*.cpp): setup adds the CLI11 subcommand and its options and returns a runner
// that is called when the user picked it. Errors: throw reckon::Error; main prints it on
// one line and exits with status 1.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "reckon/core/error.h"
#include "reckon/core/tensor.h"

namespace reckon::tools {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& app, CLI::App*& sub)>;

std::vector<Setup>& commands();
struct RegisterCommand {
  explicit RegisterCommand(Setup s) { commands().push_back(std::move(s)); }
};

// "3x224x224" (or "3,224,224") -> {3, 224, 224}.
inline Shape parse_input(const std::string& s, const char* cmd) {
  Shape r;
  std::string cur;
  auto bad = [&] {
    return Error(fmt::format("[{}] --input must be CxHxW with positive sizes (e.g. 3x224x224), got '{}'", cmd, s));
  };
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == 'x' || s[i] == 'X' || s[i] == ',') {
      if (cur.empty() || cur.size() > 9) throw bad();
      r.push_back(std::stoll(cur));
      cur.clear();
    } else if (s[i] >= '0' && s[i] <= '9') {
      cur += s[i];
    } else {
      throw bad();
    }
  }
  if (r.size() != 3) throw bad();
  for (auto d : r)
    if (d <= 0) throw bad();
  return r;
}

}  // namespace reckon::tools
