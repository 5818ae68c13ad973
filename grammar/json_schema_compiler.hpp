#pragma once
/// The JSON Schema compiler's state, shared by json_schema.cpp (dispatch, $ref, combinators,
/// objects, arrays) and json_schema_scalars.cpp (strings, numbers). Private to grammar/.
#include <simdjson.h>

#include <map>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

#include "config/error.hpp"
#include "grammar/grammar.hpp"
#include "grammar/json_rules.hpp"

namespace actorserve::grammar::detail {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

class schema_compiler {
 public:
  schema_compiler(json_rules& rules, std::string_view field) : j_(rules), b_(rules.builder()), field_(field) {}

  result<expr> compile_document(std::string_view text);

  // Shared with json_schema_scalars.cpp.
  result<expr> string_expr(object s, const std::string& where);
  result<expr> number_expr(object s, bool integer, const std::string& where);
  error unsupported(const std::string& where, std::string_view keyword, std::string_view why = {}) const;
  error invalid(const std::string& where, std::string_view keyword, std::string_view why) const;
  /// A non-negative integer keyword value (a count bound), checked against max_schema_bound.
  result<int64_t> count(object s, std::string_view keyword, const std::string& where) const;

 private:
  result<expr> compile(element s, const std::string& where, int depth);
  result<expr> compile_object_schema(object s, const std::string& where, int depth);
  result<expr> compile_ref(std::string_view ref, const std::string& where, int depth);
  result<expr> compile_type(object s, std::string_view type, const std::string& where, int depth);
  result<expr> object_expr(object s, const std::string& where, int depth);
  result<expr> array_expr(object s, const std::string& where, int depth);
  result<expr> literal(element v, const std::string& where);
  /// Extra property names: non-empty, printable ASCII without '"' and '\', none of `known`.
  expr extra_key(const std::vector<std::string>& known);

  json_rules& j_;
  grammar_builder& b_;
  std::string field_;
  simdjson::dom::parser parser_;
  element root_;
  std::map<std::string, rule_id> refs_;
  uint32_t next_object_ = 0;
};

}  // namespace actorserve::grammar::detail
