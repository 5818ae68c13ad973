#include "protocol/chat_output/tool_call_parser.hpp"

#include <array>

#include "protocol/chat_output/call_scan.hpp"

namespace actorserve::protocol::chat_output {
namespace {

constexpr std::string_view hermes_open = "<tool_call>";
constexpr std::string_view hermes_close = "</tool_call>";
constexpr std::string_view mistral_open = "[TOOL_CALLS]";
constexpr std::string_view python_tag = "<|python_tag|>";
constexpr std::array<std::string_view, 2> arg_keys{"arguments", "parameters"};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

tool_call_parser::tool_call_parser(tool_parser_kind kind, bool parallel)
    : kind_(kind), parallel_(parallel), rng_(std::random_device{}()) {
  if (kind == tool_parser_kind::deepseek_v3) deepseek_.emplace(parallel);
}

output_piece tool_call_parser::with_ids(output_piece out) {
  for (auto& call : out.tool_calls)
    if (!call.name.empty()) call.id = new_id();
  return out;
}

output_piece tool_call_parser::push(std::string_view text) {
  if (deepseek_) return with_ids(deepseek_->push(text));
  output_piece out;
  buf_.append(text);
  drain(out, false);
  return out;
}

output_piece tool_call_parser::finish() {
  if (deepseek_) return with_ids(deepseek_->finish());
  output_piece out;
  drain(out, true);
  return out;
}

std::string tool_call_parser::new_id() {
  // Mistral's template accepts only 9 alphanumerics; others look like OpenAI's call_ ids.
  static constexpr std::string_view alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const bool mistral = kind_ == tool_parser_kind::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += alnum[rng_() % alnum.size()];
  return id;
}

void tool_call_parser::drain(output_piece& out, bool at_end) {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case mode::content: progressed = drain_content(out, at_end); break;
      case mode::between: progressed = drain_between(at_end); break;
      case mode::object: progressed = drain_object(out, at_end); break;
    }
    if (!progressed) return;
  }
}

bool tool_call_parser::drain_content(output_piece& out, bool at_end) {
  if (buf_.empty()) return false;
  if (kind_ == tool_parser_kind::llama3_json) {
    // Calls only where the output opens with one.
    if (!saw_content_) {
      const size_t first = buf_.find_first_not_of(" \n\r\t");
      if (first == std::string::npos) return false;  // only whitespace so far
      const std::string_view rest = std::string_view(buf_).substr(first);
      if (rest.starts_with(python_tag) || rest.front() == '{') {
        buf_.erase(0, first + (rest.starts_with(python_tag) ? python_tag.size() : 0));
        mode_ = mode::between;
        return true;
      }
      if (!at_end && python_tag.starts_with(rest)) return false;
      saw_content_ = true;
    }
    out.content += buf_;
    buf_.clear();
    return false;
  }
  const std::string_view open = kind_ == tool_parser_kind::hermes ? hermes_open : mistral_open;
  if (!take_content_until(buf_, open, num_calls_ > 0, at_end, out.content)) return false;
  mode_ = mode::between;
  return true;
}

bool tool_call_parser::drain_between(bool at_end) {
  size_t i = 0;
  const bool mistral = kind_ == tool_parser_kind::mistral;
  const bool llama = kind_ == tool_parser_kind::llama3_json;
  while (i < buf_.size() && (is_space(buf_[i]) || (mistral && (buf_[i] == '[' || buf_[i] == ',' || buf_[i] == ']')) ||
                             (llama && buf_[i] == ';')))
    ++i;
  buf_.erase(0, i);
  if (buf_.empty()) return false;
  if (buf_.front() == '{') {
    mode_ = mode::object;
    header_sent_ = false;
    args_sent_ = 0;
    return true;
  }
  if (kind_ == tool_parser_kind::hermes) {
    if (buf_.starts_with(hermes_close)) {
      buf_.erase(0, hermes_close.size());
      mode_ = mode::content;
      return true;
    }
    if (!at_end && hermes_close.starts_with(buf_)) return false;
  }
  // Anything else ends these calls: the rest is read as content (where hermes and mistral may
  // open further calls).
  saw_content_ = true;
  mode_ = mode::content;
  return true;
}

bool tool_call_parser::drain_object(output_piece& out, bool at_end) {
  const call_scan s = scan_call(buf_, arg_keys);
  const bool wanted = parallel_ || num_calls_ == 0 || header_sent_;
  // NOTE: a name is a call even when the object turns out malformed after it: a stream sends the
  // name as soon as it is complete, so the whole parse must do the same to agree with it.
  if (s.name && !s.name->empty() && !header_sent_ && (parallel_ || num_calls_ == 0)) {
    out.tool_calls.push_back({num_calls_, new_id(), *s.name, ""});
    header_sent_ = true;
    ++num_calls_;
  }
  if (header_sent_ && s.args_begin != call_scan::npos) {
    size_t until = s.args_begin;
    if (s.args_end != call_scan::npos) until = s.args_end;
    else if (s.args_nested) until = buf_.size();
    if (until > s.args_begin + args_sent_) {
      std::string piece = buf_.substr(s.args_begin + args_sent_, until - s.args_begin - args_sent_);
      args_sent_ += piece.size();
      if (!out.tool_calls.empty() && out.tool_calls.back().index == num_calls_ - 1)
        out.tool_calls.back().arguments += piece;
      else
        out.tool_calls.push_back({num_calls_ - 1, "", "", std::move(piece)});
    }
  }
  if (!s.complete && !s.malformed) {
    if (!at_end) return false;
    if (!header_sent_ && wanted) out.content += buf_;  // never became a call
    buf_.clear();
    return false;
  }
  // A malformed object ends at the byte that broke it; what follows is read as content.
  const size_t end = s.end;
  if (header_sent_ && s.args_begin == call_scan::npos) out.tool_calls.push_back({num_calls_ - 1, "", "", "{}"});
  if ((!header_sent_ && wanted) || s.malformed) {
    if (!header_sent_) out.content += buf_.substr(0, end);
    saw_content_ = true;
    mode_ = mode::content;
  } else {
    mode_ = mode::between;
  }
  buf_.erase(0, end);
  return true;
}

}  // namespace actorserve::protocol::chat_output
