// A run's metrics as rows, written side by side to DIR/metrics.csv and DIR/metrics.jsonl.
// Each row has a kind ("train" for a logged step, "epoch" for an epoch's training summary,
// "test" for an evaluation), the global step, the values the caller gives and the unix wall
// time. CSV columns are fixed when the log is opened; a value missing from a row is an empty
// cell in the CSV and absent from the JSON line. Numbers are written exactly: a value that is
// a float (a loss read from an f32 tensor) with float's shortest form, others with double's.
// Not here: reading the files back, rotating them, anything but numbers as values.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reckon::io {

class MetricsLog {
 public:
  // Byte sizes of the two files: what a checkpoint records so that a resumed run can cut
  // away the rows written after it.
  struct Marks {
    int64_t csv_bytes = -1;
    int64_t jsonl_bytes = -1;
  };

  // Opens DIR/metrics.csv and DIR/metrics.jsonl (DIR must exist). Without resume the files
  // are created anew (truncated) and the CSV gets its header "kind,step,<columns>,wall_time".
  // With resume, each existing file is cut to the recorded size (if it is at least that long)
  // and appended to; a missing one is created as without resume. Throws reckon::Error naming
  // the file when one cannot be opened.
  MetricsLog(const std::string& dir, std::vector<std::string> columns, const Marks* resume = nullptr);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // requires: every name in values is one of the columns.
  void write(std::string_view kind, int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // Flushes both files to the kernel and fsyncs them.
  void flush();
  Marks marks() const;
  std::string csv_path() const { return csv_path_; }
  std::string jsonl_path() const { return jsonl_path_; }

  // The exact short text of a number ("0.25", "nan", "1e+30"); exposed for tests.
  static std::string number(double v);

 private:
  std::vector<std::string> columns_;
  std::string csv_path_, jsonl_path_;
  std::FILE* csv_ = nullptr;
  std::FILE* jsonl_ = nullptr;
};

}  // namespace reckon::io
