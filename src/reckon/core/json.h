// Parsing JSON that comes from a file (a checkpoint's metadata, the device cache, a graph): the
// nesting is capped, so neither the parse nor a message or dump that prints a value can run out
// of stack on a crafted file, and a syntax error becomes one line naming `what` and the byte.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace reckon {

inline constexpr int kMaxJsonDepth = 64;

// Throws reckon::Error "WHAT: not valid JSON at byte N: ..." or "WHAT: JSON nested deeper than 64 levels".
nlohmann::json parse_json(std::string_view text, std::string_view what);

}  // namespace reckon
