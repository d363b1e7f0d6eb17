// The `reckon` command line: one binary, subcommands that read like the pipeline. Each
// subcommand lives in its own tools/cmd_*.cpp and registers itself (command.h).

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <new>

#include "command.h"
#include "reckon/core/error.h"
#include "reckon/ledger/devices.h"

namespace reckon::tools {
std::vector<Setup>& commands() {
  static std::vector<Setup> c;
  return c;
}
}  // namespace reckon::tools

namespace {
// CLI11 2.1 reads an integer through strtoll, which answers LLONG_MAX for any larger text, so
// `--batch 99999999999999999999` became a batch of 9223372036854775807. Every integer option of
// every subcommand refuses a decimal that does not fit in 64 bits instead (a usage error).
void refuse_integers_past_64_bits(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    const bool is_int = type.rfind("INT", 0) == 0, is_uint = type.rfind("UINT", 0) == 0;
    if (!is_int && !is_uint) continue;
    o->check(CLI::Validator(
        [is_uint](std::string& s) -> std::string {
          const char* b = s.data() + (!s.empty() && s[0] == '+');
          const char* e = s.data() + s.size();
          if (b == e || (*b != '-' && (*b < '0' || *b > '9'))) return {};  // not decimal: CLI11 decides
          for (const char* p = b + (*b == '-'); p != e; ++p)
            if (*p < '0' || *p > '9') return {};
          std::errc ec;
          if (is_uint) {
            uint64_t v;
            ec = std::from_chars(b, e, v).ec;
          } else {
            int64_t v;
            ec = std::from_chars(b, e, v).ec;
          }
          if (ec == std::errc::result_out_of_range)
            return s + " does not fit in a 64-bit " + (is_uint ? "unsigned integer" : "integer");
          return {};
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_integers_past_64_bits(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"reckon: train convolutional networks and know what they cost"};
  app.require_subcommand(1);
  // A callback: only `reckon --version` asks oneDNN and cuda, not every command's start.
  app.set_version_flag("--version", std::function<std::string()>(reckon::version_text),
                       "print the version, build type, oneDNN version and cuda, then exit");
  std::vector<std::pair<CLI::App*, reckon::tools::Runner>> subs;
  for (auto& setup : reckon::tools::commands()) {
    CLI::App* sub = nullptr;
    auto run = setup(app, sub);
    subs.push_back({sub, std::move(run)});
  }
  refuse_integers_past_64_bits(app);
  // Usage errors (unknown options, bad values, a missing argument) exit 2, as the design says; CLI11
  // prints them. --help is not an error.
  // One line on stderr for every usage error, as for every other error (CLI11's own text adds a
  // second line); --help and its like print as CLI11 has them.
  bool known = false;
  std::string names;
  for (auto& [sub, run] : subs) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc == 1) {  // CLI11 would say "A subcommand is required"; the commands are what helps
    std::fprintf(stderr, "reckon: a command is needed (the commands: %s; reckon --help describes them)\n",
                 names.c_str());
    return 2;
  }
  if (argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "reckon: unknown command '%s' (the commands: %s)\n", argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string where = "reckon";
    for (auto& [sub, run] : subs)
      if (sub->parsed()) where += " " + sub->get_name();
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "reckon: %s (%s --help shows the options)\n", what.c_str(), where.c_str());
    return 2;
  }
  try {
    for (auto& [sub, run] : subs)
      if (sub && sub->parsed()) return run();
  } catch (const reckon::Error& e) {
    std::fprintf(stderr, "reckon: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // Sizes are checked before anything is allocated; what still runs out is the machine.
    std::fprintf(stderr, "reckon: out of memory (std::bad_alloc); `reckon plan` says what fits\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reckon: %s\n", e.what());
    return 1;
  }
  return 0;
}
