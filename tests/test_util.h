// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>
#include <png.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "reckon/core/error.h"
#include "reckon/io/safetensors.h"

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

// An environment variable set for a scope, then put back as it was (set or not).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  // Unsets it for the scope.
  ScopedEnv(const char* name, std::nullopt_t) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v, had_ = true;
    ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

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

// libpng's simplified writer; channels 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA), (H, W, C).
inline void write_png(const std::string& p, int w, int h, int channels, const std::vector<uint8_t>& px) {
  std::filesystem::create_directories(std::filesystem::path(p).parent_path());
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = png_uint_32(w);
  img.height = png_uint_32(h);
  img.format = channels == 1   ? PNG_FORMAT_GRAY
               : channels == 2 ? PNG_FORMAT_GA
               : channels == 3 ? PNG_FORMAT_RGB
                               : PNG_FORMAT_RGBA;
  ASSERT_TRUE(png_image_write_to_file(&img, p.c_str(), 0, px.data(), 0, nullptr)) << img.message;
}

// ---- IDX files (MNIST's format) ----

inline std::string be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[size_t(i)] = char((v >> (24 - 8 * i)) & 0xff);
  return s;
}
inline std::string idx_images(uint32_t n, uint32_t magic = 0x00000803) {
  std::string s = be32(magic) + be32(n) + be32(28) + be32(28);
  for (uint32_t i = 0; i < n * 28 * 28; ++i) s += char(i * 7 % 251);
  return s;
}
inline std::string idx_labels(uint32_t n, uint8_t bad_label = 255, uint32_t magic = 0x00000801) {
  std::string s = be32(magic) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s += char(i == n / 2 && bad_label != 255 ? bad_label : i % 10);
  return s;
}
// A raw (not gzipped) MNIST-layout directory of n training and n test samples.
inline void write_mnist_dir(const std::filesystem::path& d, uint32_t n) {
  std::filesystem::create_directories(d);
  write_file(d / "train-images-idx3-ubyte", idx_images(n));
  write_file(d / "train-labels-idx1-ubyte", idx_labels(n));
  write_file(d / "t10k-images-idx3-ubyte", idx_images(n));
  write_file(d / "t10k-labels-idx1-ubyte", idx_labels(n));
}

// ---- checkpoints and metrics of two runs ----

// metrics.csv without the columns that hold times (wall_time, images_per_s, seconds).
inline std::vector<std::string> metrics_numbers(const std::filesystem::path& csv) {
  std::stringstream in(read_file(csv));
  std::string line;
  std::vector<std::string> rows;
  std::vector<bool> keep;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    if (line.back() == ',') cells.push_back("");
    if (keep.empty())
      for (const auto& c : cells) keep.push_back(c != "wall_time" && c != "images_per_s" && c != "seconds");
    std::string row;
    for (size_t i = 0; i < cells.size() && i < keep.size(); ++i)
      if (keep[i]) row += cells[i] + ",";
    rows.push_back(row);
  }
  return rows;
}

// Largest |a - b| over the largest |b|, the values read through the strides (the shapes must agree).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto va = a.to_vector(), vb = b.to_vector();
  double scale = 1e-12, d = 0;
  for (size_t i = 0; i < vb.size(); ++i) scale = std::max(scale, std::abs(vb[i]));
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) d = std::max(d, std::abs(va[i] - vb[i]));
  return d / scale;
}

// The cosine of the angle between a and b as flat vectors (0 when either is all zeros).
inline double cosine(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector(), vb = b.to_vector();
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < va.size(); ++i) ab += va[i] * vb[i], aa += va[i] * va[i], bb += vb[i] * vb[i];
  return ab / std::sqrt(std::max(aa * bb, 1e-300));
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

// The tensors of two checkpoints are bit-identical (model and optimizer state).
inline void expect_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  SafetensorsFile fa = load_safetensors(a.string()), fb = load_safetensors(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [k, t] : fa.tensors) {
    ASSERT_TRUE(fb.tensors.count(k)) << k;
    EXPECT_TRUE(same_bits(t, fb.tensors.at(k))) << k;
  }
  for (const char* key : {"step", "epoch", "batch_in_epoch", "rng_state"})
    EXPECT_EQ(fa.metadata.at(key), fb.metadata.at(key)) << key;
}

}  // namespace reckon::test_util
