#include "protocol/chat_output/call_scan.hpp"

#include <algorithm>

namespace actorserve::protocol::chat_output {
namespace {

constexpr size_t npos = call_scan::npos;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_space(std::string_view t, size_t i) {
  while (i < t.size() && is_space(t[i])) ++i;
  return i;
}

/// One past the closing quote of the string starting at t[i] == '"', or npos if incomplete.
size_t string_end(std::string_view t, size_t i) {
  for (size_t j = i + 1; j < t.size(); ++j) {
    if (t[j] == '\\') ++j;
    else if (t[j] == '"') return j + 1;
  }
  return npos;
}

/// The string's content with the simple escapes decoded (\uXXXX is kept as written).
std::string decode_string(std::string_view quoted) {
  std::string out;
  for (size_t j = 1; j + 1 < quoted.size(); ++j) {
    char c = quoted[j];
    if (c == '\\' && j + 2 < quoted.size()) {
      c = quoted[++j];
      switch (c) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': out += "\\u"; continue;
        default: break;  // \" \\ \/
      }
    }
    out += c;
  }
  return out;
}

/// One past the end of the JSON value starting at t[i], or npos if it is incomplete.
size_t value_end(std::string_view t, size_t i) {
  if (i >= t.size()) return npos;
  if (t[i] == '"') return string_end(t, i);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    for (size_t j = i; j < t.size(); ++j) {
      const char c = t[j];
      if (c == '"') {
        j = string_end(t, j);
        if (j == npos) return npos;
        --j;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return j + 1;
      }
    }
    return npos;
  }
  // A number or literal ends at a delimiter; at the end of the text more may follow.
  for (size_t j = i; j < t.size(); ++j)
    if (t[j] == ',' || t[j] == '}' || t[j] == ']' || is_space(t[j])) return j;
  return npos;
}

}  // namespace

call_scan scan_call(std::string_view t, std::span<const std::string_view> arg_keys) {
  call_scan s;
  if (t.empty() || t[0] != '{') {
    s.malformed = true;
    return s;
  }
  size_t i = 1;
  for (;;) {
    i = skip_space(t, i);
    if (i >= t.size()) return s;
    if (t[i] == '}') {
      s.complete = true;
      s.end = i + 1;
      return s;
    }
    if (t[i] != '"') {
      s.malformed = true;
      s.end = i;
      return s;
    }
    const size_t key_end = string_end(t, i);
    if (key_end == npos) return s;
    const std::string_view key = t.substr(i + 1, key_end - i - 2);
    i = skip_space(t, key_end);
    if (i >= t.size()) return s;
    if (t[i] != ':') {
      s.malformed = true;
      s.end = i;
      return s;
    }
    i = skip_space(t, i + 1);
    if (i >= t.size()) return s;
    // A repeated key keeps its first value: a stream has sent that one already.
    const bool is_args = s.args_begin == npos && std::find(arg_keys.begin(), arg_keys.end(), key) != arg_keys.end();
    if (is_args) {
      s.args_begin = i;
      s.args_nested = t[i] == '{' || t[i] == '[';
    }
    const size_t end = value_end(t, i);
    if (end == npos) return s;
    if (is_args) s.args_end = end;
    if (key == "name" && t[i] == '"' && !s.name) s.name = decode_string(t.substr(i, end - i));
    i = skip_space(t, end);
    if (i >= t.size()) return s;
    if (t[i] == ',') {
      ++i;
    } else if (t[i] != '}') {
      s.malformed = true;
      s.end = i;
      return s;
    }
  }
}

}  // namespace actorserve::protocol::chat_output
