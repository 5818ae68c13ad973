#pragma once
/// The output of a chat request whose tool_choice is `required` or names a function. It was
/// generated under a grammar (grammar/constraint.hpp), so it is tool calls by construction, in
/// a format of this server's own rather than the model's:
///  - a named function: the output is that function's arguments (a JSON object): one call,
///    whose arguments stream as they are generated;
///  - required: a JSON array of {"name": ..., "parameters": {...}}: the calls, each whole
///    (arguments re-serialised compactly), when the output ends. An output cut short (length)
///    that does not parse is returned as content.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "protocol/chat_output/output_piece.hpp"

namespace actorserve::protocol::chat_output {

class forced_tool_calls {
 public:
  /// `function` non-empty: the named function; empty: required.
  explicit forced_tool_calls(std::string function);
  output_piece push(std::string_view text);
  output_piece finish();
  int32_t num_calls() const { return num_calls_; }

 private:
  std::string new_id();

  std::string function_;
  std::string buf_;                ///< required: the output so far
  int32_t num_calls_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace actorserve::protocol::chat_output
