#pragma once
/// Finds tool calls in a model's output text as it streams (vLLM's --tool-call-parser names):
///  - hermes (Qwen2.5, Qwen3, Hermes): <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
///    any number, anywhere; the text outside them is content.
///  - mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]; the text before is content.
///  - llama3_json (Llama 3.1/3.2/3.3): the output opens (after optional <|python_tag|>) with
///    {"name": ..., "parameters": {...}}, further calls separated by ';'. Output that opens
///    otherwise is all content.
///  - deepseek_v3 (DeepSeek-V2 / V2.5 / V3): calls between <｜tool▁calls▁begin｜> and
///    <｜tool▁calls▁end｜>, each a name and a ```json fence (deepseek_calls.hpp).
/// A call's first piece carries its index, a fresh id and its name; its arguments follow in
/// pieces as they arrive, exactly as the model wrote them, so the streamed pieces concatenate
/// to the whole-response arguments. A JSON object without a non-empty "name" is not a call: its
/// text is content. Text that may be the start of a marker is held back until it is decided.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "config/engine_config.hpp"
#include "protocol/chat_output/deepseek_calls.hpp"
#include "protocol/chat_output/output_piece.hpp"

namespace actorserve::protocol::chat_output {

class tool_call_parser {
 public:
  /// `parallel` false: calls after the first are dropped (parallel_tool_calls: false).
  tool_call_parser(tool_parser_kind kind, bool parallel);
  output_piece push(std::string_view text);
  /// The end of the output: held-back text becomes content; a call cut short stays as it is.
  output_piece finish();
  /// Calls begun so far (each got its first piece).
  int32_t num_calls() const { return deepseek_ ? deepseek_->num_calls() : num_calls_; }

 private:
  enum class mode { content, between, object };
  void drain(output_piece& out, bool at_end);
  bool drain_content(output_piece& out, bool at_end);
  bool drain_between(bool at_end);
  bool drain_object(output_piece& out, bool at_end);
  std::string new_id();
  /// Gives each call's first piece (the one with its name) a fresh id.
  output_piece with_ids(output_piece out);

  tool_parser_kind kind_;
  bool parallel_;
  mode mode_ = mode::content;
  std::string buf_;                ///< text not yet consumed
  bool saw_content_ = false;       ///< llama3_json: output opened with content: no calls
  int32_t num_calls_ = 0;
  bool header_sent_ = false;       ///< the current object's first piece went out
  size_t args_sent_ = 0;           ///< bytes of its arguments sent
  std::mt19937_64 rng_;
  std::optional<deepseek_calls> deepseek_;  ///< deepseek_v3: its own reader
};

}  // namespace actorserve::protocol::chat_output
