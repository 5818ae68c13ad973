#pragma once
/// JSON Schema -> grammar (the subset docs/chat-api.md lists). A keyword the compiler cannot
/// honour is an error that names it and where it is ("<field>: the keyword 'not' (at
/// #/properties/a) is not supported"), never a silent relaxation.
///
/// Honoured: type (a name or a list), enum, const, anyOf, oneOf (compiled as anyOf), allOf with
/// one schema, $ref to "#..." JSON pointers ($defs, definitions, nested and recursive), objects
/// (properties in schema order, required, additionalProperties false / true / a schema;
/// absent means no other properties, as OpenAI's strict mode; unevaluatedProperties false),
/// arrays (items, prefixItems, items as a list, minItems, maxItems, uniqueItems false), strings
/// (minLength, maxLength, pattern per regex.hpp, format date / time / date-time / uuid / email /
/// ipv4 / hostname), integers and numbers (minimum, maximum, exclusiveMinimum, exclusiveMaximum;
/// for numbers the bounds must be integers), boolean, null. Annotations (title, description,
/// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, ...) are ignored.
#include <string>
#include <string_view>

#include "config/error.hpp"
#include "grammar/grammar.hpp"
#include "grammar/json_rules.hpp"

namespace actorserve::grammar {

/// Largest count bound (maxLength, maxItems, ...) compiled; larger ones are refused.
inline constexpr int64_t max_schema_bound = 10000;

/// The expression of a schema given as JSON text, with its rules added to `rules`' builder.
/// `field` prefixes error messages (e.g. "response_format.json_schema.schema").
result<expr> json_schema_expr(json_rules& rules, std::string_view schema_json, std::string_view field);

/// A whole grammar for one schema.
result<grammar> json_schema_grammar(std::string_view schema_json, std::string_view field);

}  // namespace actorserve::grammar
