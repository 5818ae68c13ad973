#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol::detail {
namespace {

/// For a lead byte: number of continuation bytes and the allowed range of the first one.
struct lead_info {
  int need = -1;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
};

lead_info classify(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {};
}

/// Number of bytes from `i` (lead included) that form a valid, possibly truncated, prefix.
size_t valid_prefix(std::string_view s, size_t i, const lead_info& li) {
  size_t j = i + 1;
  for (int k = 0; k < li.need && j < s.size(); ++k, ++j) {
    auto c = static_cast<uint8_t>(s[j]);
    uint8_t lo = k == 0 ? li.lo : 0x80;
    uint8_t hi = k == 0 ? li.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return j - i;
}

}  // namespace

size_t utf8_char_len(std::string_view s, size_t i) {
  auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return 1;
  lead_info li = classify(b);
  if (li.need < 0) return 0;
  size_t len = valid_prefix(s, i, li);
  return len == static_cast<size_t>(li.need) + 1 ? len : 0;
}

void append_utf8_lossy(std::string& out, std::string_view s) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending well-formed run
  while (i < s.size()) {
    auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    lead_info li = classify(b);
    size_t len = li.need < 0 ? 1 : valid_prefix(s, i, li);
    if (li.need >= 0 && len == static_cast<size_t>(li.need) + 1) {
      i += len;
      continue;
    }
    out.append(s.substr(run_start, i - run_start));
    out.append(replacement_char);
    i += len;
    run_start = i;
  }
  out.append(s.substr(run_start));
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8_char_len(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

size_t utf8_incomplete_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto b = static_cast<uint8_t>(s[n - back]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      lead_info li = classify(b);
      if (li.need < 0 || static_cast<size_t>(li.need) < back) return 0;
      // Truncated iff every byte after the lead is a valid continuation.
      return valid_prefix(s, n - back, li) == back ? back : 0;
    }
  }
  return 0;
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace actorserve::protocol::detail
