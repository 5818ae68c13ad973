#pragma once
/// What the output parsers make of a piece of generated text: reasoning, content and pieces of
/// tool calls, in the shape of one streamed chat delta.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/openai/types.hpp"

namespace actorserve::protocol::chat_output {

struct output_piece {
  std::string reasoning;
  std::string content;
  std::vector<openai::tool_call_piece> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  /// Appends `other` (pieces of the same call stay separate entries).
  void append(output_piece&& other);
};

/// Length of the longest suffix of `text` that is a proper prefix of `marker`: text held back
/// because the next piece may complete the marker.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

/// Moves the text of `buf` before `marker` into `content`, holding back what may be the start
/// of the marker (all of it goes at the end). `after_call`: whitespace right before the marker
/// or the end of the output is layout, dropped (held until text that is not whitespace follows
/// it). Returns whether the marker was found; it is consumed then.
bool take_content_until(std::string& buf, std::string_view marker, bool after_call, bool at_end,
                        std::string& content);

}  // namespace actorserve::protocol::chat_output
