#pragma once
/// A regular-expression subset as a grammar expression.
///
/// Supported: literal characters (UTF-8), `.` (any character but the line terminators \n \r
/// U+2028 U+2029, as in ECMAScript), classes [a-z], [^...] with ranges and escapes, \d \D \w \W
/// \s \S (ECMAScript's sets), escapes \n \t \r \f \v \0 \xHH \uHHHH \u{H...} and escaped
/// punctuation, groups (...), (?:...), (?<name>...), (?P<name>...), alternation |, quantifiers
/// * + ? {n} {n,} {n,m} (bounds up to 10000) and their lazy forms (*? etc., the same language),
/// and the anchors ^ and $ at the start and end of the pattern or of a top-level alternative.
/// Refused, naming the construct: backreferences (\1, \k<name>), lookaround ((?=, (?!, (?<=, (?<!),
/// atomic groups and inline flags ((?>, (?i) ...), word boundaries (\b \B), Unicode properties
/// (\p{..} \P{..}), possessive quantifiers, \c escapes and anchors elsewhere.
#include <string_view>

#include "config/error.hpp"
#include "grammar/grammar.hpp"

namespace actorserve::grammar {

/// What the expression's bytes are.
enum class regex_target {
  raw,          ///< the matched text itself, UTF-8 (guided_regex)
  json_string,  ///< the content of a JSON string whose decoded value matches (JSON Schema pattern)
};

/// How the pattern must match.
enum class regex_match {
  whole,   ///< the whole text (guided_regex); ^ and $ change nothing
  search,  ///< somewhere in the text (JSON Schema `pattern`): an unanchored side may have any text
};

/// The expression for `pattern`; `field` names the request field in errors
/// ("<field>: <what> is not supported").
result<expr> regex_expr(std::string_view pattern, regex_target target, regex_match match, std::string_view field);

}  // namespace actorserve::grammar
