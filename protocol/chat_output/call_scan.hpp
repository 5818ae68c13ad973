#pragma once
/// Scans the text of one tool-call JSON object as it grows ({"name": ..., "arguments": {...}}),
/// finding the function name and the raw text of its arguments before the object is complete,
/// so the arguments can stream in pieces. Tolerant: it reports what it has found so far.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace actorserve::protocol::chat_output {

struct call_scan {
  static constexpr size_t npos = std::string_view::npos;
  bool complete = false;              ///< the object closed
  bool malformed = false;             ///< not a JSON object of the expected shape
  size_t end = 0;                     ///< complete: one past '}'; malformed: the offending byte
  std::optional<std::string> name;    ///< the "name" member once its string is complete
  size_t args_begin = npos;           ///< where the arguments value starts
  size_t args_end = npos;             ///< one past its end, once complete
  bool args_nested = false;           ///< the value is an object or array: any prefix is its own text
};

/// Scans `text`, which starts at a '{'. `arg_keys` name the arguments member ("arguments",
/// "parameters").
call_scan scan_call(std::string_view text, std::span<const std::string_view> arg_keys);

}  // namespace actorserve::protocol::chat_output
