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
#include "reckon/core/file.h"

namespace reckon::data::detail {

using reckon::file_error;
using reckon::one_line;

// The whole of a regular file (a FIFO or a directory refused before anything blocks), or an
// error naming it.
inline std::vector<uint8_t> read_whole_file(const char* tag, const std::string& path) {
  const std::string bytes = read_regular_file(path, tag);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

}  // namespace reckon::data::detail
