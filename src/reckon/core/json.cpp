#include "reckon/core/json.h"

#include <fmt/format.h>

#include "reckon/core/error.h"
#include "reckon/core/file.h"

namespace reckon {

nlohmann::json parse_json(std::string_view text, std::string_view what) {
  using json = nlohmann::json;
  // Throwing from the callback ends the parse at the first value too deep.
  json::parser_callback_t cb = [&](int depth, json::parse_event_t, json&) {
    if (depth >= kMaxJsonDepth) throw Error(fmt::format("{}: JSON nested deeper than {} levels", what, kMaxJsonDepth));
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (auto p = why.find("syntax error"); p != std::string::npos) why = why.substr(p);
    for (char& c : why)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    throw Error(one_line(fmt::format("{}: not valid JSON at byte {}: {}", what, e.byte > 0 ? e.byte - 1 : 0, why)));
  } catch (const json::exception& e) {
    throw Error(one_line(fmt::format("{}: not valid JSON: {}", what, e.what())));
  }
}

}  // namespace reckon
