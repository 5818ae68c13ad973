#pragma once
// Constraints whose languages are finite, so that a random model always completes them: the
// record schema and the regex the engine tests generate under (CPU and CUDA executors).
#include "grammar/constraint.hpp"

namespace actorserve::grammar::testing {

inline constexpr const char* kRecordSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "color": {"enum": ["red", "green", "blue"]},
    "member": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    "score": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 9}, {"type": "null"}]}},
  "required": ["name", "age", "color", "member", "tags", "score"], "additionalProperties": false})";

inline constexpr const char* kRecordRegex = "(ab|c){1,4}x{2,5}";

/// `text` under `kind`, as the request field `field` asks for it.
inline constraint_spec constraint_of(constraint_spec::kind kind, const char* text, const char* field) {
  constraint_spec s;
  s.type = kind;
  s.text = text;
  s.field = field;
  return s;
}

inline constraint_spec record_schema_spec() {
  return constraint_of(constraint_spec::kind::json_schema, kRecordSchema, "guided_json");
}
inline constraint_spec record_regex_spec() { return constraint_of(constraint_spec::kind::regex, kRecordRegex, "guided_regex"); }

}  // namespace actorserve::grammar::testing
