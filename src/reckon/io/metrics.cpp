// CSV and JSON-lines metrics files (see metrics.h).
#include "reckon/io/metrics.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "reckon/core/error.h"
#include "reckon/io/files.h"

namespace reckon::io {

namespace {

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_size);
}

// Opens path for appending; with mark >= 0 an existing file is first cut to mark bytes.
// Returns the file and whether it was created empty (needs a header).
// The file is opened through io::open_output: a symbolic link or a FIFO at the name is refused.
std::FILE* open_log(const std::string& path, int64_t mark, bool& fresh) {
  const bool existed = file_size(path) >= 0;
  fresh = mark < 0 || !existed;
  return open_output(path, fresh ? 0 : mark, "metrics");
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string MetricsLog::number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  float f = float(v);
  if (double(f) == v) return fmt::format("{}", f);
  return fmt::format("{}", v);
}

MetricsLog::MetricsLog(const std::string& dir, std::vector<std::string> columns, const Marks* resume)
    : columns_(std::move(columns)) {
  namespace fs = std::filesystem;
  csv_path_ = (fs::path(dir) / "metrics.csv").string();
  jsonl_path_ = (fs::path(dir) / "metrics.jsonl").string();
  bool csv_fresh = false, jsonl_fresh = false;
  csv_ = open_log(csv_path_, resume ? resume->csv_bytes : -1, csv_fresh);
  try {
    jsonl_ = open_log(jsonl_path_, resume ? resume->jsonl_bytes : -1, jsonl_fresh);
  } catch (...) {
    std::fclose(csv_);
    throw;
  }
  if (csv_fresh) {
    std::string header = "kind,step";
    for (const auto& c : columns_) header += "," + c;
    header += ",wall_time\n";
    std::fputs(header.c_str(), csv_);
  }
}

MetricsLog::~MetricsLog() {
  if (csv_) std::fclose(csv_);
  if (jsonl_) std::fclose(jsonl_);
}

void MetricsLog::write(std::string_view kind, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [name, v] : values)
    RK_CHECK(std::find(columns_.begin(), columns_.end(), name) != columns_.end(),
             "[metrics] '{}' is not a column of {}", name, csv_path_);
  double now = unix_time();
  std::string csv = fmt::format("{},{}", kind, step);
  for (const auto& c : columns_) {
    csv += ",";
    for (const auto& [name, v] : values)
      if (name == c) {
        csv += number(v);
        break;
      }
  }
  csv += fmt::format(",{:.3f}\n", now);
  std::fputs(csv.c_str(), csv_);

  std::string js = fmt::format("{{\"kind\":{},\"step\":{}", nlohmann::json(std::string(kind)).dump(), step);
  for (const auto& c : columns_)
    for (const auto& [name, v] : values)
      if (name == c) {
        js += fmt::format(",{}:{}", nlohmann::json(c).dump(), std::isfinite(v) ? number(v) : std::string("null"));
        break;
      }
  js += fmt::format(",\"wall_time\":{:.3f}}}\n", now);
  std::fputs(js.c_str(), jsonl_);
}

void MetricsLog::flush() {
  for (std::FILE* f : {csv_, jsonl_}) {
    std::fflush(f);
    ::fsync(::fileno(f));
  }
}

MetricsLog::Marks MetricsLog::marks() const {
  Marks m;
  std::fflush(csv_);
  std::fflush(jsonl_);
  m.csv_bytes = int64_t(std::ftell(csv_));
  m.jsonl_bytes = int64_t(std::ftell(jsonl_));
  return m;
}

}  // namespace reckon::io
