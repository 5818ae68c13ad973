#pragma once
/// A grammar written as text, for tests, the fuzz target and debugging. One rule per definition:
///
///   root   ::= "{" pair ("," pair)* "}" | "null"
///   pair   ::= [a-z]+ ":" [0-9]{1,3}
///
/// Terminals are byte strings ("..." with \n \t \r \\ \" \xHH escapes) and byte classes
/// ([a-z_], [^"\\], with the same escapes); `.` is any byte. Postfix * + ? {n} {n,} {n,m};
/// ( ... ) groups; # starts a comment. Names may be used before they are defined.
#include <string_view>

#include "config/error.hpp"
#include "grammar/grammar.hpp"

namespace actorserve::grammar {

/// The grammar of `text` starting at rule `root`; errors name the line and what is wrong.
result<grammar> parse_ebnf(std::string_view text, std::string_view root = "root");

}  // namespace actorserve::grammar
