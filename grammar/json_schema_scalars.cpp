// JSON Schema -> grammar: strings (lengths, pattern, format) and numbers (bounds).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "grammar/json_schema.hpp"
#include "grammar/json_schema_compiler.hpp"
#include "grammar/number_range.hpp"
#include "grammar/regex.hpp"

namespace actorserve::grammar::detail {
namespace {

/// Formats as regular expressions over the decoded string (regex.hpp's subset), whole match.
/// date and date-time check the days of each month and leap years (RFC 3339); time has
/// seconds and an offset (Z or +hh:mm); email follows the HTML / ajv pattern; hostname has at
/// most three labels (so it stays under 253 characters).
struct known_format {
  std::string_view name;
  std::string_view regex;
};

#define AS_DATE                                                                                          \
  "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|" \
  "02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|"    \
  "[13579][26])00)-02-29)"
#define AS_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define AS_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

constexpr known_format formats[] = {
    {"date", AS_DATE},
    {"time", AS_TIME},
    {"date-time", AS_DATE "T" AS_TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:" AS_LABEL "\\.)+" AS_LABEL},
    {"ipv4", "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
    {"hostname", AS_LABEL "(?:\\." AS_LABEL "){0,2}"},
};

#undef AS_DATE
#undef AS_TIME
#undef AS_LABEL

/// Numbers beyond this magnitude are refused as bounds (the grammar counts digits exactly).
constexpr double max_bound_magnitude = 1e15;

}  // namespace

result<expr> schema_compiler::string_expr(object s, const std::string& where) {
  auto min = count(s, "minLength", where);
  if (!min) return min.err();
  auto max = count(s, "maxLength", where);
  if (!max) return max.err();
  const bool lengths = *min > 0 || *max >= 0;
  std::string_view pattern, format;
  const bool has_pattern = !s["pattern"].get(pattern);
  const bool has_format = !s["format"].get(format);
  if (element e; !s["pattern"].get(e) && !has_pattern) return invalid(where, "pattern", "expected a string");
  if (element e; !s["format"].get(e) && !has_format) return invalid(where, "format", "expected a string");
  if (has_pattern && (lengths || has_format))
    return unsupported(where, "pattern", lengths ? "'pattern' beside 'minLength' or 'maxLength' is not supported"
                                                 : "'pattern' beside 'format' is not supported");
  if (has_format && lengths)
    return unsupported(where, "format", "'format' beside 'minLength' or 'maxLength' is not supported");
  if (has_pattern) {
    auto e = regex_expr(pattern, regex_target::json_string, regex_match::search, field_);
    if (!e) return e.err();
    return seq({byte('"'), std::move(*e), byte('"')});
  }
  if (has_format) {
    for (const auto& f : formats) {
      if (f.name != format) continue;
      auto e = regex_expr(f.regex, regex_target::json_string, regex_match::whole, field_);
      if (!e) return e.err();
      return seq({byte('"'), std::move(*e), byte('"')});
    }
    return unsupported(where, "format", fmt::format("the format '{}' is not one of date, time, date-time, uuid, "
                                                    "email, ipv4, hostname",
                                                    format));
  }
  if (!lengths) return ref(j_.string());
  if (*max >= 0 && *max < std::max<int64_t>(*min, 0)) return invalid(where, "maxLength", "is below minLength");
  const uint32_t hi = *max >= 0 ? static_cast<uint32_t>(*max) : expr::unbounded;
  const uint32_t lo = static_cast<uint32_t>(std::max<int64_t>(*min, 0));
  return seq({byte('"'), repeat(j_.string_char(), lo, hi), byte('"')});
}

result<expr> schema_compiler::number_expr(object s, bool integer, const std::string& where) {
  std::optional<number_bound> lo, hi;
  // One bound keyword: a number, integral for type number.
  auto read = [&](std::string_view key, bool lower, bool exclusive) -> status {
    element v;
    if (s[key].get(v)) return {};
    if (v.type() == element_type::BOOL) {
      // Draft 4: exclusiveMinimum / exclusiveMaximum as booleans modifying minimum / maximum.
      return {};
    }
    double d = 0;
    if (v.type() == element_type::INT64) d = double(int64_t(v));
    else if (v.type() == element_type::UINT64) d = double(uint64_t(v));
    else if (v.type() == element_type::DOUBLE) d = double(v);
    else return invalid(where, key, "expected a number");
    if (std::fabs(d) > max_bound_magnitude)
      return unsupported(where, key, "bounds beyond 10^15 in magnitude are not supported");
    number_bound b;
    if (integer) {
      // For integers a fractional or exclusive bound is the nearest integer inside it.
      const double r = lower ? std::ceil(d) : std::floor(d);
      b.value = static_cast<int64_t>(r);
      if (exclusive && r == d) b.value += lower ? 1 : -1;
    } else {
      if (std::floor(d) != d)
        return unsupported(where, key, "for type number, only integer bounds are supported");
      b.value = static_cast<int64_t>(d);
      b.exclusive = exclusive;
    }
    auto& slot = lower ? lo : hi;
    // The tighter of two bounds on one side.
    if (!slot || (lower ? (b.value > slot->value || (b.value == slot->value && b.exclusive))
                        : (b.value < slot->value || (b.value == slot->value && b.exclusive))))
      slot = b;
    return {};
  };
  auto draft4 = [&](std::string_view key) {
    element v;
    return !s[key].get(v) && v.type() == element_type::BOOL && bool(v);
  };
  if (auto st = read("minimum", true, draft4("exclusiveMinimum")); !st) return st.err();
  if (auto st = read("maximum", false, draft4("exclusiveMaximum")); !st) return st.err();
  if (auto st = read("exclusiveMinimum", true, true); !st) return st.err();
  if (auto st = read("exclusiveMaximum", false, true); !st) return st.err();
  if (integer) {
    if (!lo && !hi) return ref(j_.integer());
    std::optional<int64_t> a, b;
    if (lo) a = lo->value;
    if (hi) b = hi->value;
    if (a && b && *a > *b) return invalid(where, "maximum", "no integer lies within the bounds");
    return integer_range(a, b);
  }
  if (!lo && !hi) return ref(j_.number());
  if (lo && hi && (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive))))
    return invalid(where, "maximum", "no number lies within the bounds");
  return number_range(lo, hi);
}

}  // namespace actorserve::grammar::detail
