// TensorBoard event files, written by hand: no TensorFlow, no protobuf library.
// A file is a sequence of TFRecords
//   u64 length (little-endian), u32 masked_crc32c(length bytes), data, u32 masked_crc32c(data)
// where each data is a serialized tensorflow.Event:
//   wall_time (double, field 1), step (int64, field 2), file_version (string, field 3, only in
//   the first record: "brain.Event:2"), summary (Summary, field 5) holding one
//   Summary.Value {tag (string, field 1), simple_value (float, field 2)}.
// This is what TensorBoard's scalar dashboard reads. Not here: images, histograms, graphs,
// reading event files (the tests carry their own reader).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace reckon::io {

// CRC-32C (Castagnoli), as TFRecord uses it, continuing from crc (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// data framed as one TFRecord.
std::string tfrecord(std::string_view data);
// Serialized Event messages.
std::string encode_file_version_event(double wall_time);
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

class EventWriter {
 public:
  // Creates DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.<n> (n makes it new) and
  // writes the file_version record. Throws reckon::Error naming the file when it cannot.
  explicit EventWriter(const std::string& dir);
  // Resume: reopens an existing events file cut to `bytes` (a size bytes() returned earlier)
  // and appends to it. When the file is missing or shorter, behaves as EventWriter(dir of file).
  EventWriter(const std::string& file, int64_t bytes);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // wall_time < 0: now.
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time = -1.0);
  void flush();  // to the kernel, and fsync
  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }

 private:
  void create_in(const std::string& dir);
  void append(const std::string& record);
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace reckon::io
