#pragma once
/// Splits a reasoning model's output at <think>...</think> (vLLM's --reasoning-parser):
///  - deepseek_r1: the output is reasoning up to </think> (a leading <think> is dropped; the
///    template may already have opened it), content after it; no </think>: all reasoning.
///  - qwen3: reasoning only when the output opens with <think>; up to </think>, then content.
///    Output that does not open with <think> (thinking disabled) is all content.
/// Streaming: text that may be the start of a tag is held back until it is decided.
#include <string>
#include <string_view>

#include "config/engine_config.hpp"
#include "protocol/chat_output/output_piece.hpp"

namespace actorserve::protocol::chat_output {

class reasoning_parser {
 public:
  explicit reasoning_parser(reasoning_parser_kind kind) : kind_(kind) {}
  /// The next piece of output text, split.
  output_piece push(std::string_view text);
  /// The end of the output: whatever was held back.
  output_piece finish();
  /// Whether the output had a reasoning part.
  bool reasoned() const { return reasoned_; }

 private:
  enum class phase { start, reasoning, content };
  output_piece drain(bool at_end);

  reasoning_parser_kind kind_;
  phase phase_ = phase::start;
  std::string pending_;
  bool reasoned_ = false;
};

}  // namespace actorserve::protocol::chat_output
