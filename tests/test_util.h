// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace reckon::test_util
