#pragma once
/// One choice's output through the parsers the server runs: the reasoning parser first (its
/// reasoning is never searched for tool calls), then the tool-call parser over the content.
///
///   chat_output_parser p(options);
///   for (piece of text) send(p.push(piece));   // streaming: one delta per piece
///   send(p.finish());
///
/// chat_output gathers the pieces into a whole response; streaming and whole responses come
/// from the same pieces, so they agree.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/engine_config.hpp"
#include "protocol/chat_output/forced_tool_calls.hpp"
#include "protocol/chat_output/output_piece.hpp"
#include "protocol/chat_output/reasoning_parser.hpp"
#include "protocol/chat_output/tool_call_parser.hpp"

namespace actorserve::protocol::chat_output {

struct output_options {
  reasoning_parser_kind reasoning = reasoning_parser_kind::none;
  tool_parser_kind tools = tool_parser_kind::none;   ///< none: no tool parsing (tool_choice none)
  bool parallel_tool_calls = true;
  /// tool_choice required or a named function: the output is tool calls in the grammar's
  /// format (forced_tool_calls.hpp); the other parsers do not run.
  bool forced_tools = false;
  std::string forced_function;                       ///< the named function; empty: required

  bool any() const {
    return reasoning != reasoning_parser_kind::none || tools != tool_parser_kind::none || forced_tools;
  }
};

class chat_output_parser {
 public:
  explicit chat_output_parser(const output_options& options);
  output_piece push(std::string_view text);
  output_piece finish();
  /// Whether a tool call was found (finish_reason stop becomes tool_calls).
  bool called_tools() const { return (tools_ && tools_->num_calls() > 0) || (forced_ && forced_->num_calls() > 0); }
  bool parses_reasoning() const { return reasoning_.has_value(); }

 private:
  output_piece after_reasoning(output_piece&& piece, bool at_end);

  std::optional<reasoning_parser> reasoning_;
  std::optional<tool_call_parser> tools_;
  std::optional<forced_tool_calls> forced_;
};

/// A whole choice's output gathered from its pieces.
struct chat_output {
  std::optional<std::string> reasoning;     ///< set when the reasoning parser runs
  std::string content;
  std::vector<openai::tool_call> tool_calls;

  void add(output_piece&& piece);
};

}  // namespace actorserve::protocol::chat_output
