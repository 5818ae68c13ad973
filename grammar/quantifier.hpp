#pragma once
/// Postfix repetition operators as the EBNF text and the regex subset write them: * + ? {n}
/// {n,} {n,m}. Private to grammar/.
#include <cstdint>
#include <string_view>

#include "grammar/grammar.hpp"

namespace actorserve::grammar::detail {

struct quantifier {
  enum class kind {
    none,       ///< no operator at the cursor
    ok,         ///< read: min, max (expr::unbounded for none)
    malformed,  ///< '{' that is not {n}, {n,} or {n,m} (the cursor stays on it)
    too_big,    ///< a bound above the limit
    backwards,  ///< {n,m} with m < n
  };
  kind type = kind::none;
  uint32_t min = 0, max = 0;
};

/// Reads the operator at s[i] and advances i past it (when ok).
inline quantifier read_quantifier(std::string_view s, size_t& i, uint32_t max_bound) {
  quantifier q;
  if (i >= s.size()) return q;
  const char c = s[i];
  if (c == '*' || c == '+' || c == '?') {
    ++i;
    q.type = quantifier::kind::ok;
    q.min = c == '+' ? 1 : 0;
    q.max = c == '?' ? 1 : expr::unbounded;
    return q;
  }
  if (c != '{') return q;
  size_t k = i + 1;
  bool too_big = false;
  auto number = [&](uint32_t& out) {
    const size_t start = k;
    uint64_t v = 0;
    while (k < s.size() && s[k] >= '0' && s[k] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s[k] - '0');
      if (v > max_bound) {
        too_big = true;
        v = max_bound;
      }
      ++k;
    }
    out = static_cast<uint32_t>(v);
    return k > start;
  };
  q.type = quantifier::kind::malformed;
  if (!number(q.min)) return q;
  q.max = q.min;
  if (k < s.size() && s[k] == ',') {
    ++k;
    if (!number(q.max)) q.max = expr::unbounded;
  }
  if (k >= s.size() || s[k] != '}') return q;
  i = k + 1;
  q.type = too_big ? quantifier::kind::too_big : q.max < q.min ? quantifier::kind::backwards : quantifier::kind::ok;
  return q;
}

}  // namespace actorserve::grammar::detail
