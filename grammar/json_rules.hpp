#pragma once
/// The JSON building blocks every JSON grammar shares (RFC 8259), made once per builder.
///
/// Whitespace is bounded: none at all, except one optional space after ',' and after ':' (the
/// compact output of OpenAI's strict mode, or Python's json.dumps). A generation can therefore
/// always close what it opened, and never loops on whitespace.
/// Strings are UTF-8; escapes are \" \\ \/ \b \f \n \r \t and \uXXXX for any code point but
/// the UTF-16 surrogates (so every escape is exactly one character, which length bounds count).
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.hpp"

namespace actorserve::grammar {

class json_rules {
 public:
  explicit json_rules(grammar_builder& b) : b_(b) {}

  rule_id value();
  rule_id object();
  rule_id array();
  rule_id string();
  /// A string in a key position: the same language as string(), its own rule so that the
  /// tokens around the ':' after a key are decided without looking at the stack.
  rule_id key();
  rule_id number();
  rule_id integer();
  /// One character of string content (an unescaped character or one escape).
  expr string_char();

  /// "," with the optional space after it.
  static expr comma();
  /// ":" with the optional space after it.
  static expr colon();
  /// `text` as a JSON string literal, quotes included (\" \\ and \uXXXX for controls).
  static std::string quote(std::string_view text);

  grammar_builder& builder() { return b_; }

 private:
  void make_containers();
  grammar_builder& b_;
  std::optional<rule_id> value_, object_, array_, string_, key_, number_, integer_;
};

}  // namespace actorserve::grammar
