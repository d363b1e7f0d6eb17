// TensorBoard event files (see tensorboard.h): TFRecord framing and the few protobuf fields
// of tensorflow.Event and Summary that scalars need, encoded by hand.
#include "reckon/io/tensorboard.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "reckon/core/error.h"
#include "reckon/io/files.h"

namespace reckon::io {

static_assert(std::endian::native == std::endian::little, "the record framing is written as little-endian bytes");

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// ---- protobuf wire format ----
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
template <class T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out.append(s.data(), s.size());
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  uint64_t len = data.size();
  put_fixed(out, len);
  put_fixed(out, masked_crc32c(out.data(), 8));
  out.append(data.data(), data.size());
  put_fixed(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::string encode_file_version_event(double wall_time) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, value);
  std::string s;  // Summary
  put_bytes(s, 1, v);
  std::string e;  // Event
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  put_bytes(e, 5, s);
  return e;
}

// ---- EventWriter ----

EventWriter::EventWriter(const std::string& dir) { create_in(dir); }

EventWriter::EventWriter(const std::string& file, int64_t bytes) {
  struct stat st {};
  if (bytes <= 0 || ::lstat(file.c_str(), &st) != 0 || int64_t(st.st_size) < bytes) {
    create_in(std::filesystem::path(file).parent_path().string());
    return;
  }
  f_ = open_output(file, bytes, "tensorboard");  // refuses a link or a FIFO at the name
  path_ = file;
  bytes_ = bytes;
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::create_in(const std::string& dir) {
  namespace fs = std::filesystem;
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof(host) - 1] = '\0';
  auto secs = int64_t(unix_time());
  for (int n = 0;; ++n) {
    fs::path p = fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}.{}", secs, host, ::getpid(), n);
    std::error_code ec;
    if (fs::exists(p, ec)) continue;
    path_ = p.string();
    break;
  }
  f_ = open_output(path_, 0, "tensorboard");
  bytes_ = 0;
  append(tfrecord(encode_file_version_event(unix_time())));
}

void EventWriter::append(const std::string& record) {
  RK_CHECK(std::fwrite(record.data(), 1, record.size(), f_) == record.size(), "[tensorboard] {}: write failed: {}",
           path_, std::strerror(errno));
  bytes_ += int64_t(record.size());
}

void EventWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  append(tfrecord(encode_scalar_event(wall_time < 0 ? unix_time() : wall_time, step, tag, value)));
}

void EventWriter::flush() {
  std::fflush(f_);
  ::fsync(::fileno(f_));
}

}  // namespace reckon::io
