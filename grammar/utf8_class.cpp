#include "grammar/utf8_class.hpp"

#include <algorithm>
#include <string>

namespace actorserve::grammar {

code_ranges normalize(code_ranges r) {
  code_ranges cut;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, max_code_point);
    if (lo > hi) continue;
    // Without surrogates.
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  code_ranges out;
  for (auto [lo, hi] : cut) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.push_back({lo, hi});
  }
  return out;
}

code_ranges complement(const code_ranges& r) {
  const code_ranges n = normalize(r);
  code_ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= max_code_point) out.push_back({next, max_code_point});
  return normalize(std::move(out));
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

namespace {

size_t encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

/// Splits [lo, hi] (one encoded length, no surrogates) into ranges whose encodings are byte
/// ranges position by position, as sequences of byte sets.
void split(uint32_t lo, uint32_t hi, std::vector<std::vector<byte_set>>& out) {
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      split(lo, max, out);
      split(max + 1, hi, out);
      return;
    }
  }
  const size_t n = encoded_length(lo);
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<byte_set> seq;
  for (size_t i = 0; i < a.size(); ++i)
    seq.push_back(byte_set::range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  out.push_back(std::move(seq));
}

}  // namespace

expr utf8_class(const code_ranges& r) {
  std::vector<std::vector<byte_set>> seqs;
  for (auto [lo, hi] : normalize(r)) split(lo, hi, seqs);
  // One-byte sequences merge into one set.
  byte_set single;
  std::vector<expr> alts;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      single |= s[0];
      continue;
    }
    std::vector<expr> items;
    for (const byte_set& b : s) items.push_back(bytes(b));
    alts.push_back(seq(std::move(items)));
  }
  if (!single.empty()) alts.insert(alts.begin(), bytes(single));
  if (alts.empty()) return never();
  return alt(std::move(alts));
}

expr json_string_class(const code_ranges& r) {
  const code_ranges n = normalize(r);
  auto contains = [&](uint32_t cp) {
    for (auto [lo, hi] : n)
      if (cp >= lo && cp <= hi) return true;
    return false;
  };
  // Unescaped: everything but controls, '"' and '\'.
  code_ranges plain;
  for (auto [lo, hi] : n) {
    const uint32_t from = std::max<uint32_t>(lo, 0x20);
    if (from > hi) continue;
    uint32_t start = from;
    for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (special >= start && special <= hi) {
        if (special > start) plain.push_back({start, special - 1});
        start = special + 1;
      }
    }
    if (start <= hi) plain.push_back({start, hi});
  }
  std::vector<expr> alts;
  if (!plain.empty()) alts.push_back(utf8_class(plain));
  if (contains('"')) alts.push_back(lit("\\\""));
  if (contains('\\')) alts.push_back(lit("\\\\"));
  byte_set short_escapes;
  const std::pair<uint32_t, char> shorts[] = {{'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
  for (auto [cp, letter] : shorts)
    if (contains(cp)) short_escapes.set(static_cast<uint8_t>(letter));
  if (!short_escapes.empty()) alts.push_back(seq({byte('\\'), bytes(short_escapes)}));
  // \u00XX for control characters: grouped by the high hex digit (0 or 1).
  for (uint32_t hi_digit = 0; hi_digit < 2; ++hi_digit) {
    byte_set low;
    for (uint32_t d = 0; d < 16; ++d) {
      if (!contains(hi_digit * 16 + d)) continue;
      const char lower = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
      low.set(static_cast<uint8_t>(lower));
      if (d >= 10) low.set(static_cast<uint8_t>(lower - 'a' + 'A'));
    }
    if (!low.empty()) alts.push_back(seq({lit("\\u00"), byte(static_cast<uint8_t>('0' + hi_digit)), bytes(low)}));
  }
  if (alts.empty()) return never();
  return alt(std::move(alts));
}

}  // namespace actorserve::grammar
