#include "protocol/chat_output/reasoning_parser.hpp"

namespace actorserve::protocol::chat_output {
namespace {
constexpr std::string_view open_tag = "<think>";
constexpr std::string_view close_tag = "</think>";
}  // namespace

output_piece reasoning_parser::push(std::string_view text) {
  pending_.append(text);
  return drain(false);
}

output_piece reasoning_parser::finish() { return drain(true); }

output_piece reasoning_parser::drain(bool at_end) {
  output_piece out;
  if (phase_ == phase::start) {
    if (pending_.starts_with(open_tag)) {
      pending_.erase(0, open_tag.size());
      phase_ = phase::reasoning;
    } else if (!at_end && open_tag.starts_with(pending_)) {
      return out;  // may still become <think>
    } else {
      phase_ = kind_ == reasoning_parser_kind::deepseek_r1 ? phase::reasoning : phase::content;
    }
    reasoned_ = phase_ == phase::reasoning;
  }
  if (phase_ == phase::reasoning) {
    const size_t close = pending_.find(close_tag);
    if (close == std::string::npos) {
      const size_t keep = at_end ? 0 : partial_marker_suffix(pending_, close_tag);
      out.reasoning = pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    out.reasoning = pending_.substr(0, close);
    pending_.erase(0, close + close_tag.size());
    phase_ = phase::content;
  }
  out.content = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace actorserve::protocol::chat_output
