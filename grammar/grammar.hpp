#pragma once
/// A context-free grammar over bytes, as the pushdown automaton (stack.hpp) reads it.
///
/// Rules have alternatives; an alternative is a sequence of elements, each a byte from a set or
/// a reference to a rule, closed by an `end` element. All elements of all rules sit in one flat
/// array, so a position in the grammar (a stack frame) is one element index. Grammars are made
/// with `grammar_builder` from expressions (`expr`: literals, byte sets, sequences, choices,
/// repetitions), which it lowers into rules: a repetition becomes right-recursive rules whose
/// recursive reference is the last element (a tail call: the automaton's stack does not grow
/// with the number of repetitions), and a bounded repetition a chain of rules, one per count
/// still allowed (`chain`), so counts need no counters on the stack.
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"
#include "grammar/byte_set.hpp"

namespace actorserve::grammar {

using rule_id = uint32_t;

/// One element of an alternative.
struct element {
  enum class kind : uint8_t { bytes, rule, end };
  kind type = kind::end;
  uint32_t value = 0;  ///< bytes: index of its byte_set; rule: the rule id
};

/// Rules made for one bounded repetition, by level: levels[k - 1] is the rule that still allows
/// k more items (or must take k more, for the mandatory part). Each level's alternatives have the
/// same shape, so a token of at most L bytes, which completes at most L items, cannot tell
/// levels above L + 1 apart: the mask tables of those levels are shared (compiled_grammar).
struct chain {
  std::vector<rule_id> levels;
};

class grammar {
 public:
  rule_id root() const { return root_; }
  uint32_t num_rules() const { return static_cast<uint32_t>(rule_first_alt_.size() - 1); }
  uint32_t num_elements() const { return static_cast<uint32_t>(elements_.size()); }
  /// First element index of each alternative of rule `r`.
  std::span<const uint32_t> alternatives(rule_id r) const {
    return std::span<const uint32_t>(alt_begin_).subspan(rule_first_alt_[r], rule_first_alt_[r + 1] - rule_first_alt_[r]);
  }
  const element& at(uint32_t pos) const { return elements_[pos]; }
  const byte_set& set(uint32_t index) const { return sets_[index]; }
  /// The byte set of a `bytes` element.
  const byte_set& bytes_at(uint32_t pos) const { return sets_[elements_[pos].value]; }
  rule_id rule_of(uint32_t pos) const { return element_rule_[pos]; }
  const std::string& name(rule_id r) const { return names_[r]; }
  const std::vector<chain>& chains() const { return chains_; }
  /// Whether rule `r` derives the empty string.
  bool nullable(rule_id r) const { return nullable_[r] != 0; }

  /// The grammar as EBNF-like text, one rule per line ("name ::= alt | alt").
  std::string to_string() const;

 private:
  friend class grammar_builder;
  rule_id root_ = 0;
  std::vector<element> elements_;
  std::vector<rule_id> element_rule_;
  std::vector<uint32_t> alt_begin_;
  std::vector<uint32_t> rule_first_alt_{0};
  std::vector<byte_set> sets_;
  std::vector<std::string> names_;
  std::vector<chain> chains_;
  std::vector<uint8_t> nullable_;
};

/// An expression over bytes and rules; see grammar_builder::define.
struct expr {
  enum class kind : uint8_t { empty, bytes, ref, seq, alt, repeat };
  static constexpr uint32_t unbounded = std::numeric_limits<uint32_t>::max();

  kind type = kind::empty;
  byte_set set;              ///< bytes
  rule_id rule = 0;          ///< ref
  std::vector<expr> items;   ///< seq, alt; repeat: the one repeated item
  uint32_t min = 0;          ///< repeat
  uint32_t max = 0;          ///< repeat (unbounded: no bound)
};

expr empty();
/// Matches nothing (a choice without alternatives).
expr never();
expr bytes(const byte_set& s);
expr byte(uint8_t b);
/// The bytes of `text` in sequence.
expr lit(std::string_view text);
expr ref(rule_id r);
expr seq(std::vector<expr> items);
expr alt(std::vector<expr> items);
/// `item` repeated min..max times (max expr::unbounded: no upper bound). `item` must not match
/// the empty string (the builder refuses it): write (x?)* as x*.
expr repeat(expr item, uint32_t min, uint32_t max);
expr star(expr item);
expr plus(expr item);
expr opt(expr item);

class grammar_builder {
 public:
  /// Most rules one grammar may have (bounded repetitions make one per count).
  static constexpr uint32_t max_rules = 1u << 20;

  /// A new rule, defined later with `define` (so rules can refer to each other).
  rule_id declare(std::string name);
  /// Sets the body of a declared rule: an `alt` expression gives one alternative per item.
  void define(rule_id r, const expr& body);
  /// declare + define.
  rule_id add(std::string name, const expr& body);

  /// The grammar with `root` as its start rule. Errors: a declared rule never defined, a
  /// repetition of an expression that matches the empty string, left recursion that would grow
  /// the stack without reading a byte, too many rules.
  result<grammar> build(rule_id root);

 private:
  struct rule_body {
    std::vector<std::vector<element>> alts;
    bool defined = false;
  };
  uint32_t set_index(const byte_set& s);
  std::vector<std::vector<element>> lower_alternatives(const expr& e, const std::string& name);
  void lower_into(const expr& e, std::vector<element>& out, const std::string& name);
  rule_id lower_repeat(const expr& e, const std::string& name);
  /// What follows the item in a repetition rule's alternatives.
  struct next_ref {
    enum { none, self, other } kind;
    rule_id rule;
  };
  /// A new rule for a repetition: `base` alternatives, each followed by `next`, plus an empty
  /// alternative when `optional`.
  rule_id repeat_rule(std::string name, const std::vector<std::vector<element>>& base, next_ref next, bool optional);

  std::vector<rule_body> rules_;
  std::vector<std::string> names_;
  std::vector<byte_set> sets_;
  std::vector<chain> chains_;
  /// Rules made for repetitions: each non-empty alternative is one item, followed by a reference
  /// to the next repetition rule when `continued`; build() refuses items that match "".
  struct repeat_record {
    rule_id rule;
    bool continued;
  };
  std::vector<repeat_record> repeats_;
  bool too_many_ = false;
};

}  // namespace actorserve::grammar
