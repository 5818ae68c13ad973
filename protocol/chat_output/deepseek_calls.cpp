#include "protocol/chat_output/deepseek_calls.hpp"

namespace actorserve::protocol::chat_output {
namespace {

constexpr std::string_view calls_begin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view calls_end = "<｜tool▁calls▁end｜>";
constexpr std::string_view call_begin = "<｜tool▁call▁begin｜>";
constexpr std::string_view call_end = "<｜tool▁call▁end｜>";
constexpr std::string_view sep = "<｜tool▁sep｜>";
constexpr std::string_view fence_open = "```json\n";
constexpr std::string_view fence_close = "\n```";
constexpr std::string_view space = " \n\r\t";

/// Whether `buf` is a proper prefix of `marker`: the next text may complete it.
bool may_become(std::string_view buf, std::string_view marker) {
  return buf.size() < marker.size() && marker.starts_with(buf);
}

std::string_view trimmed(std::string_view s) {
  const size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

}  // namespace

output_piece deepseek_calls::push(std::string_view text) {
  output_piece out;
  buf_.append(text);
  drain(out, false);
  return out;
}

output_piece deepseek_calls::finish() {
  output_piece out;
  drain(out, true);
  return out;
}

void deepseek_calls::drain(output_piece& out, bool at_end) {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case mode::content: progressed = drain_content(out, at_end); break;
      case mode::section: progressed = drain_section(at_end); break;
      case mode::header: progressed = drain_header(out, at_end); break;
      case mode::fence: progressed = drain_fence(out, at_end); break;
      case mode::args: progressed = drain_args(out, at_end); break;
      case mode::close: progressed = drain_close(at_end); break;
    }
    if (!progressed) return;
  }
}

bool deepseek_calls::drain_content(output_piece& out, bool at_end) {
  if (buf_.empty()) return false;
  if (!take_content_until(buf_, calls_begin, num_calls_ > 0, at_end, out.content)) return false;
  mode_ = mode::section;
  return true;
}

bool deepseek_calls::drain_section(bool at_end) {
  buf_.erase(0, std::min(buf_.size(), buf_.find_first_not_of(space)));
  if (buf_.empty()) return false;
  if (buf_.starts_with(call_begin)) {
    buf_.erase(0, call_begin.size());
    mode_ = mode::header;
    return true;
  }
  if (buf_.starts_with(calls_end)) {
    buf_.erase(0, calls_end.size());
    mode_ = mode::content;
    return true;
  }
  if (!at_end && (may_become(buf_, call_begin) || may_become(buf_, calls_end))) return false;
  mode_ = mode::content;  // anything else ends the calls: the rest is content
  return true;
}

bool deepseek_calls::drain_header(output_piece& out, bool at_end) {
  // "TYPE<｜tool▁sep｜>NAME\n" on one line; the name is complete at the line's end.
  const size_t at_sep = buf_.find(sep);
  const size_t newline = buf_.find('\n');
  bool broken = newline != std::string::npos && (at_sep == std::string::npos || newline < at_sep);
  if (!broken && at_sep != std::string::npos) {
    const size_t name_end = buf_.find('\n', at_sep + sep.size());
    if (name_end != std::string::npos) {
      const std::string_view name = trimmed(std::string_view(buf_).substr(at_sep + sep.size(),
                                                                          name_end - at_sep - sep.size()));
      if (!name.empty()) {
        sending_ = parallel_ || num_calls_ == 0;
        if (sending_) {
          out.tool_calls.push_back({num_calls_, "", std::string(name), ""});
          ++num_calls_;
        }
        buf_.erase(0, name_end + 1);
        mode_ = mode::fence;
        return true;
      }
      broken = true;
    }
  }
  if (!broken && !at_end) return false;
  mode_ = mode::content;  // never became a call: its text is content
  return true;
}

bool deepseek_calls::drain_fence(output_piece& out, bool at_end) {
  if (buf_.starts_with(fence_open)) {
    buf_.erase(0, fence_open.size());
    mode_ = mode::args;
    return true;
  }
  if (!at_end && may_become(buf_, fence_open)) return false;
  add_arguments(out, "{}");  // the call stays; the text from the fence on is content
  mode_ = mode::content;
  return true;
}

bool deepseek_calls::drain_args(output_piece& out, bool at_end) {
  const size_t at = buf_.find(fence_close);
  if (at != std::string::npos) {
    add_arguments(out, std::string_view(buf_).substr(0, at));
    buf_.erase(0, at + fence_close.size());
    mode_ = mode::close;
    return true;
  }
  const size_t n = buf_.size() - (at_end ? 0 : partial_marker_suffix(buf_, fence_close));
  add_arguments(out, std::string_view(buf_).substr(0, n));
  buf_.erase(0, n);
  return false;
}

bool deepseek_calls::drain_close(bool at_end) {
  buf_.erase(0, std::min(buf_.size(), buf_.find_first_not_of(space)));
  if (buf_.empty()) return false;
  if (buf_.starts_with(call_end)) {
    buf_.erase(0, call_end.size());
    mode_ = mode::section;
    return true;
  }
  if (!at_end && may_become(buf_, call_end)) return false;
  mode_ = mode::content;  // the call is whole; the text from the break on is content
  return true;
}

void deepseek_calls::add_arguments(output_piece& out, std::string_view text) {
  if (!sending_ || text.empty()) return;
  if (!out.tool_calls.empty() && out.tool_calls.back().index == num_calls_ - 1)
    out.tool_calls.back().arguments += text;
  else
    out.tool_calls.push_back({num_calls_ - 1, "", "", std::string(text)});
}

}  // namespace actorserve::protocol::chat_output
