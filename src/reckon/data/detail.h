// Helpers shared by the data readers (not part of the public API).
#pragma once
#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "reckon/core/error.h"

namespace reckon::data::detail {

// Messages stay on one line whatever a file name holds.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

// "[tag] file: what" as a reckon::Error.
inline Error file_error(const char* tag, const std::string& file, const std::string& what) {
  return Error(one_line(fmt::format("[{}] {}: {}", tag, file, what)));
}

// The whole of a regular file, or an error naming it.
inline std::vector<uint8_t> read_whole_file(const char* tag, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw file_error(tag, path, "no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw file_error(tag, path, "not a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw file_error(tag, path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::vector<uint8_t> bytes;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) bytes.reserve(size_t(size));
  uint8_t chunk[1 << 16];
  size_t r;
  while ((r = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + r);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw file_error(tag, path, fmt::format("read error at offset {}", bytes.size()));
  return bytes;
}

}  // namespace reckon::data::detail
