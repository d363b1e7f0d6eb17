// What every fuzz target shares. A target feeds the bytes to one reader; the property it checks
// is issue 14's: bad input ends as a reckon::Error (one line), never as a crash, a hang, a
// sanitizer report or another exception type (a raw library message). Anything but a
// reckon::Error escaping aborts, which libFuzzer records as a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "reckon/core/error.h"

namespace reckon::fuzz {

// A private scratch directory for this process (tmpfs when there is one), made once and removed
// at exit (a run that crashes leaves it, beside its finding). Without the removal every fuzzing
// run of the tests left one in /dev/shm.
inline const std::filesystem::path& scratch() {
  // The path for the exit handler, in storage that no destructor runs on before it.
  static char made[4096];
  static const std::filesystem::path d = [] {
    namespace fs = std::filesystem;
    fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path p = base / ("reckon_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(p);
    if (p.native().size() < sizeof made) {
      std::snprintf(made, sizeof made, "%s", p.c_str());
      std::atexit([] {
        std::error_code ec;
        std::filesystem::remove_all(made, ec);
      });
    }
    return p;
  }();
  return d;
}

// Writes bytes to scratch()/name and returns its path.
inline std::string put(const std::string& name, const uint8_t* data, size_t size) {
  const std::string p = (scratch() / name).string();
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return p;
}

// Runs f; a reckon::Error is the expected outcome of bad input, anything else is a finding.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: an exception that is not a reckon::Error escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace reckon::fuzz
