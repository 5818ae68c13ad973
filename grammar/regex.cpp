#include "grammar/regex.hpp"

#include <fmt/format.h>

#include <string>

#include "grammar/quantifier.hpp"
#include "grammar/utf8_class.hpp"

namespace actorserve::grammar {
namespace {

constexpr uint32_t max_bound = 10000;
constexpr int max_depth = 256;
constexpr size_t max_pattern_bytes = 16384;

/// A parsed regex over code points.
struct node {
  enum class kind { cls, seq, alt, repeat } type = kind::seq;
  code_ranges ranges;         ///< cls
  std::vector<node> items;    ///< seq, alt; repeat: one item
  uint32_t min = 0, max = 0;  ///< repeat (expr::unbounded for none)
};

node cls(code_ranges r) {
  node n;
  n.type = node::kind::cls;
  n.ranges = normalize(std::move(r));
  return n;
}

const code_ranges digit_ranges = {{'0', '9'}};
const code_ranges word_ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const code_ranges space_ranges = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                  {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                  {0xFEFF, 0xFEFF}};
const code_ranges line_terminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class regex_parser {
 public:
  regex_parser(std::string_view p, std::string_view field) : p_(p), field_(field) {}

  /// The top-level alternatives, each with its anchors.
  struct branch {
    node body;
    bool start = false, end = false;
  };

  result<std::vector<branch>> parse() {
    if (p_.size() > max_pattern_bytes)
      return make_error(error_code::unsupported, fmt::format("{}: a pattern longer than {} bytes is not supported",
                                                             field_, max_pattern_bytes));
    std::vector<branch> out;
    while (true) {
      branch b;
      if (peek('^')) {
        ++i_;
        b.start = true;
      }
      auto body = parse_seq(0, true);
      if (!body) return body.err();
      b.body = std::move(*body);
      if (peek('$')) {
        ++i_;
        b.end = true;
      }
      out.push_back(std::move(b));
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      if (p_[i_] == ')') return bad("an unmatched ')'");
      return unsupported(fmt::format("the anchor '{}' inside the pattern", p_[i_]));
    }
    return out;
  }

 private:
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  error bad(std::string_view what) const {
    return make_error(error_code::invalid_argument, fmt::format("{}: invalid pattern at offset {}: {}", field_, i_, what));
  }
  error unsupported(std::string_view what) const {
    return make_error(error_code::unsupported, fmt::format("{}: {} is not supported in patterns", field_, what));
  }

  /// A UTF-8 code point from the pattern.
  result<uint32_t> next_code_point() {
    const auto b0 = static_cast<unsigned char>(p_[i_]);
    size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) return bad("invalid UTF-8");
    uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(p_[i_ + k]);
      if ((b >> 6) != 2) return bad("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += n;
    return cp;
  }

  result<uint32_t> hex_digits(size_t n) {
    if (i_ + n > p_.size()) return bad("expected hex digits");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char h = p_[i_++];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return bad("expected hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  /// An escape after '\' (at i_): a class of code points. `in_class`: inside [...].
  result<code_ranges> escape(bool in_class) {
    if (i_ >= p_.size()) return bad("a pattern ending in '\\'");
    const char c = p_[i_++];
    auto one = [](uint32_t cp) { return code_ranges{{cp, cp}}; };
    switch (c) {
      case 'd': return digit_ranges;
      case 'D': return complement(digit_ranges);
      case 'w': return word_ranges;
      case 'W': return complement(word_ranges);
      case 's': return space_ranges;
      case 'S': return complement(space_ranges);
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one('\b');
        return unsupported("the word boundary \\b");
      case 'B': return unsupported("the word boundary \\B");
      case 'x': {
        auto v = hex_digits(2);
        if (!v) return v.err();
        return one(*v);
      }
      case 'u': {
        if (peek('{')) {
          ++i_;
          const size_t start = i_;
          while (i_ < p_.size() && p_[i_] != '}') ++i_;
          if (i_ >= p_.size() || i_ == start || i_ - start > 6) return bad("a bad \\u{...} escape");
          const size_t end = i_;
          i_ = start;
          auto v = hex_digits(end - start);
          if (!v) return v.err();
          ++i_;  // '}'
          if (*v > max_code_point) return bad("a code point above 10FFFF");
          return one(*v);
        }
        auto v = hex_digits(4);
        if (!v) return v.err();
        return one(*v);
      }
      case 'p':
      case 'P': return unsupported("the Unicode property class \\p{...}");
      case 'k': return unsupported("the backreference \\k<name>");
      case 'c': return unsupported("the control escape \\c");
      default: break;
    }
    if (c >= '1' && c <= '9') return unsupported(fmt::format("the backreference \\{}", c));
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return unsupported(fmt::format("the escape \\{}", c));
    --i_;
    auto cp = next_code_point();
    if (!cp) return cp.err();
    return one(*cp);
  }

  result<node> parse_class() {
    ++i_;  // '['
    const bool negate = peek('^');
    if (negate) ++i_;
    code_ranges set;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      auto lo = class_atom();
      if (!lo) return lo.err();
      if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        auto hi = class_atom();
        if (!hi) return hi.err();
        if (lo->size() != 1 || hi->size() != 1 || (*lo)[0].first != (*lo)[0].second ||
            (*hi)[0].first != (*hi)[0].second)
          return bad("a class range between sets");
        if ((*hi)[0].first < (*lo)[0].first) return bad("a class range out of order");
        set.push_back({(*lo)[0].first, (*hi)[0].first});
        continue;
      }
      set.insert(set.end(), lo->begin(), lo->end());
    }
    if (!peek(']')) return bad("an unterminated class");
    ++i_;
    return cls(negate ? complement(set) : set);
  }

  result<code_ranges> class_atom() {
    if (peek('\\')) {
      ++i_;
      return escape(true);
    }
    if (peek('[') && i_ + 1 < p_.size() && (p_[i_ + 1] == ':' || p_[i_ + 1] == '=' || p_[i_ + 1] == '.'))
      return unsupported("a POSIX class [:...:]");
    auto cp = next_code_point();
    if (!cp) return cp.err();
    return code_ranges{{*cp, *cp}};
  }

  result<node> parse_alt(int depth) {
    node a;
    a.type = node::kind::alt;
    while (true) {
      auto s = parse_seq(depth, false);
      if (!s) return s.err();
      a.items.push_back(std::move(*s));
      if (!peek('|')) break;
      ++i_;
    }
    if (a.items.size() == 1) return std::move(a.items[0]);
    return a;
  }

  /// A sequence up to '|', ')' or the end; at the top level also stops at a final '$'.
  result<node> parse_seq(int depth, bool top) {
    if (depth > max_depth) return unsupported("nesting deeper than 256 groups");
    node s;
    s.type = node::kind::seq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && top && i_ + 1 == p_.size()) break;
      if (p_[i_] == '$' && top && i_ + 1 < p_.size() && p_[i_ + 1] == '|') break;
      if (p_[i_] == '^' || p_[i_] == '$') return unsupported(fmt::format("the anchor '{}' inside the pattern", p_[i_]));
      auto atom = parse_atom(depth);
      if (!atom) return atom.err();
      auto q = quantify(std::move(*atom));
      if (!q) return q.err();
      s.items.push_back(std::move(*q));
    }
    if (s.items.size() == 1) return std::move(s.items[0]);
    return s;
  }

  result<node> parse_atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (peek('?')) {
        ++i_;
        if (peek(':')) {
          ++i_;
        } else if ((peek('<') || peek('P')) && !(i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!'))) {
          if (peek('P')) ++i_;
          if (!peek('<')) return unsupported("the group syntax (?P");
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (!peek('>')) return bad("an unterminated group name");
          ++i_;
        } else if (peek('=') || peek('!')) {
          return unsupported("lookahead (?= / (?!");
        } else if (peek('<')) {
          return unsupported("lookbehind (?<= / (?<!");
        } else if (peek('>')) {
          return unsupported("the atomic group (?>");
        } else {
          return unsupported("inline flags and other (? groups");
        }
      }
      auto inner = parse_alt(depth + 1);
      if (!inner) return inner.err();
      if (!peek(')')) return bad("a '(' without ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return cls(complement(line_terminators));
    }
    if (c == '\\') {
      ++i_;
      auto r = escape(false);
      if (!r) return r.err();
      return cls(*r);
    }
    if (c == '*' || c == '+' || c == '?') return bad(fmt::format("'{}' with nothing to repeat", c));
    auto cp = next_code_point();
    if (!cp) return cp.err();
    return cls({{*cp, *cp}});
  }

  result<node> quantify(node atom) {
    while (true) {
      const detail::quantifier q = detail::read_quantifier(p_, i_, max_bound);
      if (q.type == detail::quantifier::kind::none || q.type == detail::quantifier::kind::malformed)
        return atom;  // a '{' that is no quantifier is a literal
      if (q.type == detail::quantifier::kind::too_big)
        return unsupported(fmt::format("a repetition bound above {}", max_bound));
      if (q.type == detail::quantifier::kind::backwards) return bad("a repetition {n,m} with m < n");
      if (peek('?')) ++i_;  // lazy: the same language
      else if (peek('+')) return unsupported("the possessive quantifier");
      if (simple(q.min, q.max) && atom.type == node::kind::repeat && simple(atom.min, atom.max)) {
        // A repetition of a repetition by * + ?, as in (x*)* or t**: one repetition of the same
        // language. Nested, they would give each string many readings, which multiply the
        // matcher's stacks with every byte.
        atom.min = atom.min * q.min;
        atom.max = atom.max == 1 && q.max == 1 ? 1 : expr::unbounded;
        continue;
      }
      node r;
      r.type = node::kind::repeat;
      r.min = q.min;
      r.max = q.max;
      r.items.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  /// Whether min..max is one of * + ?.
  static bool simple(uint32_t min, uint32_t max) { return min <= 1 && (max == 1 || max == expr::unbounded); }

  std::string_view p_;
  std::string_view field_;
  size_t i_ = 0;
};

bool nullable(const node& n) {
  switch (n.type) {
    case node::kind::cls: return false;
    case node::kind::seq:
      for (const node& i : n.items)
        if (!nullable(i)) return false;
      return true;
    case node::kind::alt:
      for (const node& i : n.items)
        if (nullable(i)) return true;
      return false;
    case node::kind::repeat: return n.min == 0 || nullable(n.items[0]);
  }
  return false;
}

class lowering {
 public:
  explicit lowering(regex_target t) : target_(t) {}

  expr lower(const node& n) {
    switch (n.type) {
      case node::kind::cls: return target_ == regex_target::raw ? utf8_class(n.ranges) : json_string_class(n.ranges);
      case node::kind::seq: {
        std::vector<expr> items;
        for (const node& i : n.items) items.push_back(lower(i));
        return items.empty() ? empty() : seq(std::move(items));
      }
      case node::kind::alt: {
        std::vector<expr> items;
        for (const node& i : n.items) items.push_back(lower(i));
        return alt(std::move(items));
      }
      case node::kind::repeat: {
        const node& item = n.items[0];
        if (n.max == 0) return empty();
        if (!nullable(item)) return repeat(lower(item), n.min, n.max);
        // (x){n,m} with x matching "" is (x without "")  {0,m}.
        return repeat(lower_nonempty(item), 0, n.max);
      }
    }
    return never();
  }

  /// The language of `n` without the empty string.
  expr lower_nonempty(const node& n) {
    if (!nullable(n)) return lower(n);
    switch (n.type) {
      case node::kind::cls: return lower(n);
      case node::kind::alt: {
        std::vector<expr> items;
        for (const node& i : n.items) items.push_back(lower_nonempty(i));
        return alt(std::move(items));
      }
      case node::kind::repeat: {
        const node& item = n.items[0];
        if (n.max == 0) return never();
        const expr x = nullable(item) ? lower_nonempty(item) : lower(item);
        return repeat(x, std::max<uint32_t>(n.min, 1), n.max);
      }
      case node::kind::seq: {
        // L(a rest) \ "" = (L(a) \ "") rest  |  L(rest) \ ""   (a is nullable here)
        if (n.items.empty()) return never();
        node rest;
        rest.type = node::kind::seq;
        rest.items.assign(n.items.begin() + 1, n.items.end());
        return alt({seq({lower_nonempty(n.items[0]), lower(rest)}), lower_nonempty(rest)});
      }
    }
    return never();
  }

 private:
  regex_target target_;
};

}  // namespace

result<expr> regex_expr(std::string_view pattern, regex_target target, regex_match match, std::string_view field) {
  regex_parser p(pattern, field);
  auto branches = p.parse();
  if (!branches) return branches.err();
  lowering low(target);
  const expr any = star(low.lower(cls({{0, max_code_point}})));
  std::vector<expr> alts;
  for (const auto& b : *branches) {
    std::vector<expr> parts;
    if (match == regex_match::search && !b.start) parts.push_back(any);
    parts.push_back(low.lower(b.body));
    if (match == regex_match::search && !b.end) parts.push_back(any);
    alts.push_back(seq(std::move(parts)));
  }
  return alt(std::move(alts));
}

}  // namespace actorserve::grammar
