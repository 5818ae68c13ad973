#pragma once
/// Typed reads of simdjson DOM fields whose errors name the file and the field path. Included
/// only by the tokenizer's loader .cpp files (simdjson stays out of public headers).
#include <fmt/format.h>
#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

#include "config/error.hpp"

namespace actorserve::protocol::detail {

namespace dom = simdjson::dom;

/// A JSON object plus where it came from (file and field path), for error messages.
struct json_obj {
  dom::object obj;
  const std::string* file;
  std::string path;  ///< e.g. "model." or "pre_tokenizer.pretokenizers[1]."

  error bad(std::string_view key, std::string_view want) const {
    return make_error(error_code::malformed_file, fmt::format("{}: field '{}{}' must be {}", *file, path, key, want));
  }
  error unsupported(std::string_view key, std::string_view value) const {
    return make_error(error_code::unsupported,
                      fmt::format("{}: field '{}{}' has unsupported value '{}'", *file, path, key, value));
  }
  /// The field, or nullopt when absent or null.
  std::optional<dom::element> find(std::string_view key) const {
    dom::element e;
    if (obj[key].get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
    return e;
  }
  json_obj child(dom::object o, std::string_view key) const { return {o, file, fmt::format("{}{}.", path, key)}; }

  status get_bool(std::string_view key, bool& out) const {
    auto e = find(key);
    if (!e) return {};
    if (e->get_bool().get(out) != simdjson::SUCCESS) return bad(key, "a boolean");
    return {};
  }
  status get_string(std::string_view key, std::string& out) const {
    auto e = find(key);
    if (!e) return {};
    std::string_view v;
    if (e->get_string().get(v) != simdjson::SUCCESS) return bad(key, "a string");
    out.assign(v);
    return {};
  }
  status get_int(std::string_view key, int64_t& out) const {
    auto e = find(key);
    if (!e) return {};
    if (e->get_int64().get(out) != simdjson::SUCCESS) return bad(key, "an integer");
    return {};
  }
  /// A required object field.
  result<json_obj> get_object(std::string_view key) const {
    auto e = find(key);
    dom::object o;
    if (!e || e->get_object().get(o) != simdjson::SUCCESS) return bad(key, "an object");
    return child(o, key);
  }
  /// The "type" field, required.
  result<std::string> type() const {
    std::string t;
    if (status s = get_string("type", t); !s) return s.err();
    if (t.empty()) return bad("type", "a non-empty string");
    return t;
  }
};

}  // namespace actorserve::protocol::detail
