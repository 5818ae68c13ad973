#include "protocol/json/writer.hpp"

#include <charconv>
#include <cmath>

namespace actorserve::protocol::json {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

/// Length of the valid UTF-8 sequence starting at s[i] (RFC 3629: no overlongs, no surrogates,
/// nothing above U+10FFFF), or 0 if the bytes there are not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void append_string(std::string& out, std::string_view s) {
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    // Copy the longest run of plain printable ASCII at once.
    size_t run = i;
    while (run < s.size()) {
      const auto c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
      ++run;
    }
    out.append(s.data() + i, run - i);
    i = run;
    if (i == s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (size_t len = utf8_sequence_length(s, i)) {
        out.append(s.data() + i, len);
        i += len;
      } else {
        out += kReplacement;
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
    }
    ++i;
  }
  out += '"';
}

void append_double(std::string& out, double v) {
  if (std::isnan(v)) { out += "null"; return; }
  if (std::isinf(v)) { out += v < 0 ? "-9999.0" : "1e308"; return; }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

writer& writer::num(int64_t v) {
  sep();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, end);
  comma_ = true;
  return *this;
}

writer& writer::int_array(std::span<const int32_t> v) {
  sep();
  out_ += '[';
  char buf[16];
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out_ += ',';
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v[i]);
    out_.append(buf, end);
  }
  out_ += ']';
  comma_ = true;
  return *this;
}

}  // namespace actorserve::protocol::json
