#include "protocol/openai/json_fields.hpp"

#include <cmath>

#include <fmt/format.h>

#include <limits>

namespace actorserve::protocol::detail {

result<element> parse_document(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc))
    return make_error(error_code::invalid_argument,
                      fmt::format("body: invalid JSON ({})", simdjson::error_message(err)));
  return doc;
}

result<simdjson::dom::object> parse_object(std::string_view body) {
  auto doc = parse_document(body);
  if (!doc) return doc.err();
  simdjson::dom::object obj;
  if (doc->get(obj)) return make_error(error_code::invalid_argument, "body: expected a JSON object");
  return obj;
}

error field_error(std::string_view field, std::string_view why) {
  return make_error(error_code::invalid_argument, fmt::format("{}: {}", field, why));
}

status read_bool(element e, std::string_view field, bool& out) {
  if (e.get(out)) return field_error(field, "expected a boolean");
  return {};
}

status read_string(element e, std::string_view field, std::string& out) {
  std::string_view s;
  if (e.get(s)) return field_error(field, "expected a string");
  out.assign(s);
  return {};
}

status read_float(element e, std::string_view field, float& out) {
  double d = 0;
  if (e.type() == element_type::INT64) d = static_cast<double>(int64_t(e));
  else if (e.type() == element_type::UINT64) d = static_cast<double>(uint64_t(e));
  else if (e.type() == element_type::DOUBLE) d = double(e);
  else return field_error(field, "expected a number");
  if (d > std::numeric_limits<float>::max() || d < -std::numeric_limits<float>::max())
    return field_error(field, "number out of range");
  out = static_cast<float>(d);
  return {};
}

status read_int(element e, std::string_view field, int64_t lo, int64_t hi, int64_t& out) {
  int64_t v = 0;
  if (e.type() == element_type::INT64) {
    v = int64_t(e);
  } else if (e.type() == element_type::UINT64) {
    return field_error(field, fmt::format("must be in [{}, {}], got {}", lo, hi, uint64_t(e)));
  } else if (e.type() == element_type::DOUBLE) {
    const double d = double(e);
    if (!std::isfinite(d) || d != std::trunc(d)) return field_error(field, "expected an integer");
    // NOTE: range-check as double first: casting a double outside int64 is undefined.
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      return field_error(field, fmt::format("must be in [{}, {}], got {}", lo, hi, d));
    v = static_cast<int64_t>(d);
  } else {
    return field_error(field, "expected an integer");
  }
  if (v < lo || v > hi) return field_error(field, fmt::format("must be in [{}, {}], got {}", lo, hi, v));
  out = v;
  return {};
}

status read_int32(element e, std::string_view field, int32_t lo, int32_t hi, int32_t& out) {
  int64_t v = 0;
  if (auto st = read_int(e, field, lo, hi, v); !st) return st;
  out = static_cast<int32_t>(v);
  return {};
}

status read_token_ids(element e, std::string_view field, std::vector<int32_t>& out) {
  simdjson::dom::array arr;
  if (e.get(arr)) return field_error(field, "expected an array of token ids");
  out.clear();
  out.reserve(arr.size());
  for (element id : arr) {
    int32_t v = 0;
    if (!is_integer(id)) return field_error(field, "token ids must be integers");
    if (auto st = read_int32(id, field, 0, std::numeric_limits<int32_t>::max(), v); !st) return st;
    out.push_back(v);
  }
  return {};
}

chat_value to_chat_value(element e) {
  switch (e.type()) {
    case element_type::ARRAY: {
      chat_value::array items;
      for (element item : simdjson::dom::array(e)) items.push_back(to_chat_value(item));
      return chat_value(std::move(items));
    }
    case element_type::OBJECT: {
      chat_value::object members;
      for (auto [key, value] : simdjson::dom::object(e)) members.emplace_back(std::string(key), to_chat_value(value));
      return chat_value(std::move(members));
    }
    case element_type::INT64: return chat_value(int64_t(e));
    case element_type::UINT64: return chat_value(static_cast<double>(uint64_t(e)));
    case element_type::DOUBLE: return chat_value(double(e));
    case element_type::STRING: return chat_value(std::string_view(e));
    case element_type::BOOL: return chat_value(bool(e));
    case element_type::NULL_VALUE: return chat_value();
  }
  return chat_value();
}

error unsupported_field(std::string_view field, std::string_view why) {
  return make_error(error_code::unsupported, fmt::format("{}: {}", field, why));
}

}  // namespace actorserve::protocol::detail
