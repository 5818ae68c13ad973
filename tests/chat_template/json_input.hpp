#pragma once
/// Test helper: JSON text -> chat_value (simdjson DOM), keeping object key order.
#include <simdjson.h>

#include <stdexcept>
#include <string>

#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::testing {

inline protocol::chat_value to_chat_value(simdjson::dom::element e) {
  using protocol::chat_value;
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY: {
      chat_value::array items;
      for (auto item : e.get_array()) items.push_back(to_chat_value(item));
      return chat_value(std::move(items));
    }
    case simdjson::dom::element_type::OBJECT: {
      chat_value::object members;
      for (auto field : e.get_object()) members.emplace_back(std::string(field.key), to_chat_value(field.value));
      return chat_value(std::move(members));
    }
    case simdjson::dom::element_type::INT64: return chat_value(static_cast<std::int64_t>(e.get_int64()));
    case simdjson::dom::element_type::UINT64: return chat_value(static_cast<double>(e.get_uint64()));
    case simdjson::dom::element_type::DOUBLE: return chat_value(static_cast<double>(e.get_double()));
    case simdjson::dom::element_type::STRING: return chat_value(std::string(std::string_view(e.get_string())));
    case simdjson::dom::element_type::BOOL: return chat_value(static_cast<bool>(e.get_bool()));
    case simdjson::dom::element_type::NULL_VALUE: return chat_value();
  }
  return chat_value();
}

/// Parses JSON text; throws std::runtime_error on bad JSON (tests only).
inline protocol::chat_value parse_json(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(text).get(doc)) throw std::runtime_error("bad JSON in test input");
  return to_chat_value(doc);
}

}  // namespace actorserve::testing
