#pragma once
/// Template source -> tokens, applying Jinja's whitespace rules as Hugging Face configures them:
/// trim_blocks, lstrip_blocks, `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}`, `+` to opt out, newlines
/// normalized to "\n" and one trailing newline dropped (keep_trailing_newline=False).
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::protocol::jinja {

enum class token_kind { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct token {
  token_kind kind = token_kind::eof;
  std::string text;  ///< data text, name, decoded string literal, number text or operator symbol
  int line = 1;
};

/// Tokenizes a whole template; throws template_error on an unterminated tag, comment or string.
std::vector<token> tokenize(std::string_view source);

}  // namespace actorserve::protocol::jinja
