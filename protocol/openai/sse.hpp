#pragma once
/// Server-sent events framing as the OpenAI streaming API uses it.
#include <string>
#include <string_view>

namespace actorserve::protocol::sse {

/// `data: <json>\n\n`. The payload must not contain a newline (compact JSON never does).
inline std::string event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

/// The terminating event of an OpenAI stream.
inline constexpr std::string_view done = "data: [DONE]\n\n";

}  // namespace actorserve::protocol::sse
