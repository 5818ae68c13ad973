#include "grammar/number_range.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace actorserve::grammar {
namespace {

expr digit() { return bytes(byte_set::range('0', '9')); }

expr digit_range(char lo, char hi) {
  return bytes(byte_set::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

bool all_of(const std::string& s, char c) { return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; }); }

/// Digit strings of one length from x to y (x <= y, as strings of equal length).
expr same_length(const std::string& x, const std::string& y) {
  if (x.empty()) return empty();
  if (x == y) return lit(x);
  const size_t n = x.size() - 1;
  const std::string xr = x.substr(1), yr = y.substr(1);
  if (x[0] == y[0]) return seq({byte(static_cast<uint8_t>(x[0])), same_length(xr, yr)});
  std::vector<expr> parts;
  char first_full = x[0], last_full = y[0];
  if (!all_of(xr, '0')) {
    parts.push_back(seq({byte(static_cast<uint8_t>(x[0])), same_length(xr, std::string(n, '9'))}));
    ++first_full;
  }
  std::optional<expr> tail;
  if (!all_of(yr, '9')) {
    tail = seq({byte(static_cast<uint8_t>(y[0])), same_length(std::string(n, '0'), yr)});
    --last_full;
  }
  if (first_full <= last_full) parts.push_back(seq({digit_range(first_full, last_full), repeat(digit(), n, n)}));
  if (tail) parts.push_back(std::move(*tail));
  return alt(std::move(parts));
}

uint64_t pow10(size_t n) {
  uint64_t v = 1;
  while (n--) v *= 10;
  return v;
}

/// Non-negative integers in [a, b] (b nullopt: unbounded) without leading zeros.
expr naturals(uint64_t a, std::optional<uint64_t> b) {
  if (b && a > *b) return never();
  std::vector<expr> parts;
  if (a == 0) {
    parts.push_back(byte('0'));
    if (b && *b == 0) return parts[0];
    a = 1;
  }
  const size_t la = std::to_string(a).size();
  const size_t lb = b ? std::to_string(*b).size() : la;
  for (size_t len = la; len <= lb; ++len) {
    const uint64_t lo = std::max(a, pow10(len - 1));
    const uint64_t hi = b ? std::min(*b, pow10(len) - 1) : pow10(len) - 1;
    if (lo <= hi) parts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  if (!b) parts.push_back(seq({digit_range('1', '9'), repeat(digit(), static_cast<uint32_t>(lb), expr::unbounded)}));
  return alt(std::move(parts));
}

enum class frac { any, zero, nonzero };

/// A piece of a range: integer parts k in [lo, hi] with a fraction of a kind.
struct piece {
  uint64_t lo;
  std::optional<uint64_t> hi;
  frac f;
};

std::vector<piece> intersect(const std::vector<piece>& a, const std::vector<piece>& b) {
  std::vector<piece> out;
  for (const piece& x : a) {
    for (const piece& y : b) {
      const uint64_t lo = std::max(x.lo, y.lo);
      std::optional<uint64_t> hi = x.hi;
      if (y.hi) hi = hi ? std::min(*hi, *y.hi) : *y.hi;
      if (hi && lo > *hi) continue;
      frac f;
      if (x.f == frac::any) f = y.f;
      else if (y.f == frac::any || y.f == x.f) f = x.f;
      else continue;
      out.push_back({lo, hi, f});
    }
  }
  return out;
}

expr fraction(frac f) {
  switch (f) {
    case frac::any: return opt(seq({byte('.'), plus(digit())}));
    case frac::zero: return opt(seq({byte('.'), plus(byte('0'))}));
    case frac::nonzero: return seq({byte('.'), star(digit()), digit_range('1', '9'), star(digit())});
  }
  return never();
}

expr pieces_expr(const std::vector<piece>& ps) {
  std::vector<expr> parts;
  for (const piece& p : ps) parts.push_back(seq({naturals(p.lo, p.hi), fraction(p.f)}));
  return alt(std::move(parts));
}

const std::vector<piece> everything = {{0, std::nullopt, frac::any}};

/// Magnitude pieces m = k.f >= b (or > b when exclusive), for b >= 0.
std::vector<piece> at_least(uint64_t b, bool exclusive) {
  if (!exclusive) return {{b, std::nullopt, frac::any}};
  return {{b + 1, std::nullopt, frac::any}, {b, b, frac::nonzero}};
}

/// Magnitude pieces m = k.f <= b (or < b when exclusive), for b >= 0.
std::vector<piece> at_most(uint64_t b, bool exclusive) {
  std::vector<piece> out;
  if (b > 0) out.push_back({0, b - 1, frac::any});
  if (!exclusive) out.push_back({b, b, frac::zero});
  return out;
}

}  // namespace

expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<expr> parts;
  if (lo && hi && *lo > *hi) return never();
  // Negative values: "-" and magnitudes in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> to;
    if (lo) to = static_cast<uint64_t>(-*lo);
    parts.push_back(seq({byte('-'), naturals(from, to)}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    parts.insert(parts.begin(), naturals(from, to));
  }
  return alt(std::move(parts));
}

expr number_range(std::optional<number_bound> lo, std::optional<number_bound> hi) {
  std::vector<expr> parts;
  // Values >= 0, written without '-': magnitude = value.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    std::vector<piece> ps = everything;
    if (lo && (lo->value > 0 || (lo->value == 0 && lo->exclusive)))
      ps = intersect(ps, at_least(static_cast<uint64_t>(lo->value), lo->exclusive));
    if (hi) ps = intersect(ps, at_most(static_cast<uint64_t>(hi->value), hi->exclusive));
    if (!ps.empty()) parts.push_back(pieces_expr(ps));
  }
  // Values < 0, written with '-': magnitude = -value > 0.
  if (!lo || lo->value < 0) {
    std::vector<piece> ps = at_least(0, true);
    if (lo) ps = intersect(ps, at_most(static_cast<uint64_t>(-lo->value), lo->exclusive));
    if (hi && hi->value < 0) ps = intersect(ps, at_least(static_cast<uint64_t>(-hi->value), hi->exclusive));
    if (!ps.empty()) parts.push_back(seq({byte('-'), pieces_expr(ps)}));
  }
  return alt(std::move(parts));
}

}  // namespace actorserve::grammar
