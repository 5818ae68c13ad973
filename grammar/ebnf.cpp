#include "grammar/ebnf.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>

#include "grammar/quantifier.hpp"

namespace actorserve::grammar {
namespace {

/// Most nested groups the parser follows (the fuzz target feeds it anything).
constexpr int max_depth = 64;
/// Largest repetition bound accepted in the text.
constexpr uint32_t max_bound = 10000;

class ebnf_parser {
 public:
  explicit ebnf_parser(std::string_view text) : s_(text) {}

  result<grammar> parse(std::string_view root_name) {
    skip_space();
    while (i_ < s_.size()) {
      std::string name = read_name();
      if (name.empty()) return fail("expected a rule name");
      skip_space();
      if (s_.substr(i_, 3) != "::=") return fail(fmt::format("expected ::= after '{}'", name));
      i_ += 3;
      auto body = parse_alts(0);
      if (!body) return body.err();
      const rule_id r = rule(name);
      if (defined_.count(name)) return fail(fmt::format("rule '{}' is defined twice", name));
      defined_[name] = true;
      b_.define(r, *body);
      skip_space();
    }
    for (const auto& [name, id] : ids_)
      if (!defined_.count(name)) return make_error(error_code::invalid_argument, fmt::format("grammar: rule '{}' is used but not defined", name));
    auto it = ids_.find(std::string(root_name));
    if (it == ids_.end())
      return make_error(error_code::invalid_argument, fmt::format("grammar: no rule '{}'", root_name));
    return b_.build(it->second);
  }

 private:
  error fail(std::string_view why) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    return make_error(error_code::invalid_argument, fmt::format("grammar: line {}: {}", line, why));
  }

  /// Skips spaces, line ends and comments.
  void skip_space() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string read_name() {
    const size_t start = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  /// Whether a name at the cursor starts a new rule ("name ::=").
  bool at_definition() const {
    size_t k = i_;
    while (k < s_.size() && name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r')) ++k;
    return s_.substr(k, 3) == "::=";
  }

  rule_id rule(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const rule_id r = b_.declare(name);
    ids_[name] = r;
    return r;
  }

  result<expr> parse_alts(int depth) {
    if (depth > max_depth) return fail("groups nested too deeply");
    std::vector<expr> alts;
    while (true) {
      auto one = parse_seq(depth);
      if (!one) return one.err();
      alts.push_back(std::move(*one));
      skip_space();
      if (i_ < s_.size() && s_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    return alt(std::move(alts));
  }

  result<expr> parse_seq(int depth) {
    std::vector<expr> items;
    while (true) {
      skip_space();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_definition()) break;
      auto item = parse_item(depth);
      if (!item) return item.err();
      items.push_back(std::move(*item));
    }
    if (items.empty()) return empty();
    return seq(std::move(items));
  }

  result<expr> parse_item(int depth) {
    auto prim = parse_primary(depth);
    if (!prim) return prim.err();
    expr e = std::move(*prim);
    while (true) {
      const detail::quantifier q = detail::read_quantifier(s_, i_, max_bound);
      if (q.type == detail::quantifier::kind::none) break;
      if (q.type == detail::quantifier::kind::malformed) return fail("expected {n}, {n,} or {n,m}");
      if (q.type == detail::quantifier::kind::too_big) return fail(fmt::format("a repetition bound above {}", max_bound));
      if (q.type == detail::quantifier::kind::backwards) return fail("a repetition's maximum is below its minimum");
      e = repeat(std::move(e), q.min, q.max);
    }
    return e;
  }

  /// One possibly escaped byte of a string or class.
  result<uint8_t> read_byte() {
    if (i_ >= s_.size()) return fail("unexpected end of text");
    const char c = s_[i_++];
    if (c != '\\') return static_cast<uint8_t>(c);
    if (i_ >= s_.size()) return fail("unexpected end after \\");
    const char e = s_[i_++];
    switch (e) {
      case 'n': return uint8_t{'\n'};
      case 't': return uint8_t{'\t'};
      case 'r': return uint8_t{'\r'};
      case 'x': {
        if (i_ + 2 > s_.size()) return fail("expected two hex digits after \\x");
        unsigned v = 0;
        for (int k = 0; k < 2; ++k) {
          const char h = s_[i_++];
          v = v * 16 + static_cast<unsigned>(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
          if (v > 255) return fail("bad hex digit after \\x");
        }
        return static_cast<uint8_t>(v);
      }
      default: return static_cast<uint8_t>(e);
    }
  }

  result<expr> parse_primary(int depth) {
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      std::string text;
      while (i_ < s_.size() && s_[i_] != '"') {
        auto b = read_byte();
        if (!b) return b.err();
        text.push_back(static_cast<char>(*b));
      }
      if (i_ >= s_.size()) return fail("unterminated string");
      ++i_;
      return text.empty() ? empty() : lit(text);
    }
    if (c == '[') {
      ++i_;
      const bool negate = i_ < s_.size() && s_[i_] == '^';
      if (negate) ++i_;
      byte_set set;
      while (i_ < s_.size() && s_[i_] != ']') {
        auto lo = read_byte();
        if (!lo) return lo.err();
        uint8_t hi = *lo;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          auto h = read_byte();
          if (!h) return h.err();
          hi = *h;
          if (hi < *lo) return fail("a class range runs backwards");
        }
        set.set_range(*lo, hi);
      }
      if (i_ >= s_.size()) return fail("unterminated class");
      ++i_;
      if (negate) set = ~set;
      if (set.empty()) return fail("an empty class");
      return bytes(set);
    }
    if (c == '.') {
      ++i_;
      return bytes(byte_set::all());
    }
    if (c == '(') {
      ++i_;
      auto inner = parse_alts(depth + 1);
      if (!inner) return inner.err();
      skip_space();
      if (i_ >= s_.size() || s_[i_] != ')') return fail("expected )");
      ++i_;
      return inner;
    }
    if (name_char(c)) return ref(rule(read_name()));
    return fail(fmt::format("unexpected '{}'", c));
  }

  std::string_view s_;
  size_t i_ = 0;
  grammar_builder b_;
  std::map<std::string, rule_id> ids_;
  std::map<std::string, bool> defined_;
};

}  // namespace

result<grammar> parse_ebnf(std::string_view text, std::string_view root) { return ebnf_parser(text).parse(root); }

}  // namespace actorserve::grammar
