// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reckon/core/error.h"

namespace reckon::test_util {

// The message of the reckon::Error f throws; "" and a test failure if it throws none or throws
// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a reckon::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// A new, empty directory under the system's temp directory, one per process and name:
// reckon_<prefix>_<name>_<pid> (removed first if a run before left it).
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("reckon_" + prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A file's bytes ("" when it cannot be read), and bytes written to a file.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// The python3 the tests run their oracle scripts with: $RECKON_PYTHON, else the one on PATH.
inline std::string python() {
  const char* p = std::getenv("RECKON_PYTHON");
  return p && *p ? p : "python3";
}
// A shell command's exit status (128 when it did not exit normally).
inline int run_shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// The reckon binary next to the test binary, run with args in dir (stdout and stderr kept).
inline std::string reckon_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "reckon").string();
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

inline CliResult run_cli(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  std::string cmd = shell_quote(reckon_binary());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  std::filesystem::path out = dir / "cli.out", err = dir / "cli.err";
  cmd += " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string()) + " </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace reckon::test_util
