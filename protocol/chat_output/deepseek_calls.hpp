#pragma once
/// DeepSeek-V2 / V2.5 / V3's tool-call format (vLLM's --tool-call-parser deepseek_v3), read as
/// it streams:
///
///   text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
///   <｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
///
/// The text before the calls is content; a call's arguments are the text between its "```json"
/// line and the next "\n```", exactly as written, streamed as they arrive. Whitespace between
/// the markers is layout. Where the format breaks, the text from there on is content: before a
/// call's name is complete (it ends at its line's end) nothing became a call; after it the call
/// stays (its arguments "{}" when none came). Text after the calls' end marker is content (it
/// may open further calls). A call cut short by the end of the output stays as it is.
/// Pieces carry no ids (tool_call_parser gives them).
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/chat_output/output_piece.hpp"

namespace actorserve::protocol::chat_output {

class deepseek_calls {
 public:
  /// `parallel` false: calls after the first are read but dropped.
  explicit deepseek_calls(bool parallel) : parallel_(parallel) {}
  output_piece push(std::string_view text);
  output_piece finish();
  int32_t num_calls() const { return num_calls_; }

 private:
  enum class mode { content, section, header, fence, args, close };
  void drain(output_piece& out, bool at_end);
  bool drain_content(output_piece& out, bool at_end);
  bool drain_section(bool at_end);
  bool drain_header(output_piece& out, bool at_end);
  bool drain_fence(output_piece& out, bool at_end);
  bool drain_args(output_piece& out, bool at_end);
  bool drain_close(bool at_end);
  void add_arguments(output_piece& out, std::string_view text);

  bool parallel_;
  mode mode_ = mode::content;
  std::string buf_;          ///< text not yet consumed
  int32_t num_calls_ = 0;    ///< calls sent (their first piece went out)
  bool sending_ = false;     ///< the current call is sent (false: dropped, parallel_tool_calls off)
};

}  // namespace actorserve::protocol::chat_output
