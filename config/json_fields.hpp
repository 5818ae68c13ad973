#pragma once
/// Typed reads of the fields of one JSON object of a file (config.json, generation_config.json,
/// tokenizer.json), with errors that name the file and the field path. Included only by .cpp
/// files and the tokenizer loaders' internal header: simdjson stays out of public headers.
#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace actorserve {

namespace dom = simdjson::dom;

/// A JSON object plus where it came from (file and field path), for error messages.
struct json_obj {
  dom::object obj;
  const std::string* file;
  std::string path;  ///< e.g. "model." or "pre_tokenizer.pretokenizers[1]."

  error bad(std::string_view key, std::string_view want) const {
    return make_error(error_code::malformed_file, fmt::format("{}: field '{}{}' must be {}", *file, path, key, want));
  }
  error missing(std::string_view key) const {
    return make_error(error_code::malformed_file, fmt::format("{}: missing field '{}{}'", *file, path, key));
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

  // NOTE: an absent or null field leaves `out` as it is, unless `required` makes it an error.
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
  /// An integer of at least `min_value` (any, 0 or 1 name it in the error).
  status get_int(std::string_view key, int64_t& out, bool required = false,
                 int64_t min_value = std::numeric_limits<int64_t>::min()) const {
    auto e = find(key);
    if (!e) return required ? status(missing(key)) : status();
    int64_t v = 0;
    if (e->get_int64().get(v) != simdjson::SUCCESS || v < min_value)
      return bad(key, min_value > 0 ? "a positive integer" : min_value == 0 ? "a non-negative integer" : "an integer");
    out = v;
    return {};
  }
  /// A finite number.
  status get_double(std::string_view key, double& out, bool required = false) const {
    auto e = find(key);
    if (!e) return required ? status(missing(key)) : status();
    double v = 0;
    if (e->get_double().get(v) != simdjson::SUCCESS || !std::isfinite(v)) return bad(key, "a number");
    out = v;
    return {};
  }
  /// A token id or a list of token ids; absent or null leaves `out` empty.
  status get_id_list(std::string_view key, std::vector<int32_t>& out) const {
    constexpr int64_t max_id = std::numeric_limits<int32_t>::max();
    out.clear();
    auto e = find(key);
    if (!e) return {};
    int64_t v = 0;
    if (e->get_int64().get(v) == simdjson::SUCCESS) {
      if (v < 0 || v > max_id) return bad(key, "a token id or a list of token ids");
      out.push_back(static_cast<int32_t>(v));
      return {};
    }
    dom::array arr;
    if (e->get_array().get(arr) != simdjson::SUCCESS) return bad(key, "a token id or a list of token ids");
    for (dom::element item : arr) {
      if (item.get_int64().get(v) != simdjson::SUCCESS || v < 0 || v > max_id)
        return bad(key, "a token id or a list of token ids");
      out.push_back(static_cast<int32_t>(v));
    }
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

}  // namespace actorserve
