#include "protocol/chat_template/utf8_text.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace actorserve::protocol::jinja {
namespace {

/// Length of the UTF-8 sequence starting at s[i] (1 for an invalid byte).
std::size_t sequence_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t n = 1;
  if (b >= 0xF0 && b < 0xF8) {
    n = 4;
  } else if (b >= 0xE0) {
    n = b < 0xF0 ? 3 : 1;
  } else if (b >= 0xC2) {
    n = 2;
  }
  if (i + n > s.size()) return 1;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

char32_t decode_at(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (n == 1) return b;
  char32_t c = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return c;
}

struct code_point {
  std::size_t begin;
  std::size_t size;
  char32_t c;
};

template <class F>
void for_each_code_point(std::string_view s, F&& f) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_length(s, i);
    f(code_point{i, n, decode_at(s, i, n)});
    i += n;
  }
}

char upper_char(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char lower_char(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for_each_code_point(s, [&](const code_point& cp) { out.push_back(cp.begin); });
  out.push_back(s.size());
  return out;
}

std::size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  std::size_t n = 0;
  for_each_code_point(s, [&](const code_point&) { ++n; });
  return n;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

bool is_py_space(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return true;
  if (c < 0x80) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) for_each_code_point(*chars, [&](const code_point& cp) { set.push_back(cp.c); });
  auto strip_it = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  std::vector<code_point> cps;
  for_each_code_point(s, [&](const code_point& cp) { cps.push_back(cp); });
  std::size_t b = 0;
  std::size_t e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b].c)) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1].c)) --e;
  }
  if (b == e) return {};
  return std::string(s.substr(cps[b].begin, cps[e - 1].begin + cps[e - 1].size - cps[b].begin));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      const std::size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::vector<code_point> cps;
  for_each_code_point(s, [&](const code_point& cp) { cps.push_back(cp); });
  std::size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i].c)) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {
      std::size_t e = cps.size();
      while (e > i && is_py_space(cps[e - 1].c)) --e;
      out.emplace_back(s.substr(cps[i].begin, cps[e - 1].begin + cps[e - 1].size - cps[i].begin));
      break;
    }
    std::size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j].c)) ++j;
    out.emplace_back(s.substr(cps[i].begin, cps[j - 1].begin + cps[j - 1].size - cps[i].begin));
    i = j;
  }
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = upper_char(c);
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower_char(c);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = upper_char(out[0]);
  return out;
}

std::string py_title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    const bool non_ascii = static_cast<unsigned char>(c) >= 0x80;
    if (is_ascii_alpha(c)) {
      c = prev_cased ? lower_char(c) : upper_char(c);
      prev_cased = true;
    } else {
      prev_cased = non_ascii;
    }
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool word_start = true;
  for_each_code_point(s, [&](const code_point& cp) {
    const std::string_view text = s.substr(cp.begin, cp.size);
    const bool sep = cp.c == '-' || cp.c == '(' || cp.c == '{' || cp.c == '[' || cp.c == '<' ||
                     is_py_space(cp.c);
    if (sep) {
      out += text;
      word_start = true;
    } else {
      out += word_start ? ascii_upper(text) : ascii_lower(text);
      word_start = false;
    }
  });
  return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, long count) {
  std::string out;
  if (from.empty()) {
    const auto offsets = code_point_offsets(s);
    long done = 0;
    for (std::size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += s.substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    const std::size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  static const char* hex = "0123456789abcdef";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::int64_t decimal_index(std::string_view digits) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return ec == std::errc() && end == digits.data() + digits.size() ? v : std::numeric_limits<std::int64_t>::max();
}

}  // namespace actorserve::protocol::jinja
