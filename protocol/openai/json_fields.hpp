#pragma once
/// Typed reads of JSON fields with errors that name the field. Private to protocol/ .cpp files:
/// it includes simdjson, which must not leak into other folders' headers.
#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"
#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::protocol::detail {

using simdjson::dom::element;
using simdjson::dom::element_type;

/// Parses `body` into a DOM (thread-local parser: the element lives until the next call).
result<element> parse_document(std::string_view body);
/// Parses `body` and requires a JSON object at the top.
result<simdjson::dom::object> parse_object(std::string_view body);

error field_error(std::string_view field, std::string_view why);

inline bool is_null(element e) { return e.type() == element_type::NULL_VALUE; }
inline bool is_integer(element e) {
  return e.type() == element_type::INT64 || e.type() == element_type::UINT64;
}

status read_bool(element e, std::string_view field, bool& out);
status read_string(element e, std::string_view field, std::string& out);
status read_float(element e, std::string_view field, float& out);
/// An integer in [lo, hi].
status read_int(element e, std::string_view field, int64_t lo, int64_t hi, int64_t& out);
status read_int32(element e, std::string_view field, int32_t lo, int32_t hi, int32_t& out);
/// An array of token ids (non-negative int32).
status read_token_ids(element e, std::string_view field, std::vector<int32_t>& out);

/// A JSON value as a chat_value (object key order kept), for template inputs.
chat_value to_chat_value(element e);
/// An unsupported error: "<field>: <why>".
error unsupported_field(std::string_view field, std::string_view why);

}  // namespace actorserve::protocol::detail
