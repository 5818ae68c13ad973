#include "protocol/chat_output/chat_output_parser.hpp"

namespace actorserve::protocol::chat_output {

void output_piece::append(output_piece&& other) {
  reasoning += other.reasoning;
  content += other.content;
  for (auto& call : other.tool_calls) tool_calls.push_back(std::move(call));
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  const size_t longest = std::min(text.size(), marker.size() - 1);
  for (size_t n = longest; n > 0; --n)
    if (marker.starts_with(text.substr(text.size() - n))) return n;
  return 0;
}

bool take_content_until(std::string& buf, std::string_view marker, bool after_call, bool at_end,
                        std::string& content) {
  constexpr std::string_view space = " \n\r\t";
  auto emit = [&](size_t n) {
    const std::string_view text = std::string_view(buf).substr(0, n);
    content += after_call ? text.substr(0, text.find_last_not_of(space) + 1) : text;
  };
  const size_t at = buf.find(marker);
  if (at != std::string::npos) {
    emit(at);
    buf.erase(0, at + marker.size());
    return true;
  }
  const size_t keep = at_end ? 0 : partial_marker_suffix(buf, marker);
  size_t n = buf.size() - keep;
  if (after_call && !at_end) {
    const size_t last = std::string_view(buf).substr(0, n).find_last_not_of(space);
    n = last == std::string::npos ? 0 : last + 1;
  }
  emit(n);
  buf.erase(0, at_end ? buf.size() : n);
  return false;
}

chat_output_parser::chat_output_parser(const output_options& options) {
  if (options.forced_tools) {
    forced_.emplace(options.forced_function);
    return;
  }
  if (options.reasoning != reasoning_parser_kind::none) reasoning_.emplace(options.reasoning);
  if (options.tools != tool_parser_kind::none) tools_.emplace(options.tools, options.parallel_tool_calls);
}

output_piece chat_output_parser::after_reasoning(output_piece&& piece, bool at_end) {
  if (!tools_) return std::move(piece);
  output_piece out;
  out.reasoning = std::move(piece.reasoning);
  out.append(tools_->push(piece.content));
  if (at_end) out.append(tools_->finish());
  return out;
}

output_piece chat_output_parser::push(std::string_view text) {
  if (forced_) return forced_->push(text);
  if (reasoning_) return after_reasoning(reasoning_->push(text), false);
  output_piece piece;
  piece.content = std::string(text);
  return after_reasoning(std::move(piece), false);
}

output_piece chat_output_parser::finish() {
  if (forced_) return forced_->finish();
  output_piece piece = reasoning_ ? reasoning_->finish() : output_piece{};
  return after_reasoning(std::move(piece), true);
}

void chat_output::add(output_piece&& piece) {
  if (!piece.reasoning.empty()) reasoning = reasoning.value_or("") + piece.reasoning;
  content += piece.content;
  for (auto& p : piece.tool_calls) {
    if (!p.name.empty()) tool_calls.push_back({std::move(p.id), std::move(p.name), ""});
    if (p.index >= 0 && static_cast<size_t>(p.index) < tool_calls.size())
      tool_calls[static_cast<size_t>(p.index)].arguments += p.arguments;
  }
}

}  // namespace actorserve::protocol::chat_output
