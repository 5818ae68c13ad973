#include "protocol/openai/common_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "protocol/openai/field_policy.hpp"

namespace actorserve::protocol::openai::detail_common {
namespace {

using namespace actorserve::protocol::detail;
constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr int32_t kIntMin = std::numeric_limits<int32_t>::min();
/// OpenAI clamps logit_bias values to this range.
constexpr float kMaxBias = 100.0f;

status read_stop(element v, std::vector<std::string>& out) {
  out.clear();
  if (v.type() == element_type::STRING) {
    out.emplace_back(std::string_view(v));
    return {};
  }
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error("stop", "expected a string or an array of strings");
  for (element s : arr) {
    std::string_view text;
    if (s.get(text)) return field_error("stop", "expected a string or an array of strings");
    out.emplace_back(text);
  }
  return {};
}

status read_seed(element v, std::optional<uint64_t>& out) {
  if (v.type() == element_type::INT64) out = static_cast<uint64_t>(int64_t(v));
  else if (v.type() == element_type::UINT64) out = uint64_t(v);
  else return field_error("seed", "expected an integer");
  return {};
}

status read_stream_options(element v, stream_options& o) {
  simdjson::dom::object obj;
  if (v.get(obj)) return field_error("stream_options", "expected an object");
  for (auto [key, value] : obj) {
    if (is_null(value)) continue;
    if (key == "include_usage") {
      if (auto st = read_bool(value, "stream_options.include_usage", o.include_usage); !st) return st;
    } else if (key == "include_obfuscation" || key == "continuous_usage_stats") {
      bool on = false;
      const std::string field = fmt::format("stream_options.{}", key);
      if (auto st = read_bool(value, field, on); !st) return st;
      if (on) return unsupported_field(field, "only false is supported");
    } else {
      return field_error(fmt::format("stream_options.{}", key), "unknown field");
    }
  }
  return {};
}

/// {"<token id>": bias, ...}; biases are clamped to [-100, 100] as OpenAI does.
status read_logit_bias(element v, std::vector<std::pair<int32_t, float>>& out) {
  simdjson::dom::object obj;
  if (v.get(obj)) return field_error("logit_bias", "expected an object of token id -> bias");
  out.clear();
  for (auto [key, value] : obj) {
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc{} || ptr != key.data() + key.size() || id < 0)
      return field_error("logit_bias", fmt::format("key '{}' is not a token id", key));
    float bias = 0.0f;
    if (auto st = read_float(value, "logit_bias", bias); !st) return st;
    out.emplace_back(id, std::clamp(bias, -kMaxBias, kMaxBias));
  }
  return {};
}

/// Sets the request's one output constraint; a second one is refused naming its field.
status set_constraint(output_constraint& out, output_constraint c) {
  if (out.type != output_constraint::kind::none)
    return unsupported_field(c.field, fmt::format("constrains the output as {} already does; give one of "
                                                  "response_format, guided_json, guided_regex, guided_choice and "
                                                  "structured_outputs",
                                                  out.field));
  out = std::move(c);
  return {};
}

output_constraint constraint_of(output_constraint::kind k, std::string field, std::string text = {}) {
  output_constraint c;
  c.type = k;
  c.field = std::move(field);
  c.text = std::move(text);
  return c;
}

/// A JSON schema given as an object (or a boolean), or as a string of JSON text.
status read_schema(element v, std::string field, output_constraint& out) {
  std::string text;
  if (v.type() == element_type::OBJECT || v.type() == element_type::BOOL) text = simdjson::minify(v);
  else if (v.type() == element_type::STRING) text = std::string(std::string_view(v));
  else return field_error(field, "expected a JSON schema (an object, or a string of JSON)");
  return set_constraint(out, constraint_of(output_constraint::kind::json_schema, std::move(field), std::move(text)));
}

status read_choices(element v, std::string field, output_constraint& out) {
  simdjson::dom::array arr;
  if (v.get(arr) || arr.size() == 0) return field_error(field, "expected a non-empty array of strings");
  auto c = constraint_of(output_constraint::kind::choice, field);
  for (element e : arr) {
    std::string_view s;
    if (e.get(s)) return field_error(field, "expected a non-empty array of strings");
    c.choices.emplace_back(s);
  }
  return set_constraint(out, std::move(c));
}

status read_regex(element v, std::string field, output_constraint& out) {
  std::string_view s;
  if (v.get(s)) return field_error(field, "expected a string");
  return set_constraint(out, constraint_of(output_constraint::kind::regex, std::move(field), std::string(s)));
}

/// {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "description",
/// "schema", "strict"}}. The schema is honoured whatever `strict` says (stricter than asked).
status read_response_format(element v, output_constraint& out) {
  simdjson::dom::object obj;
  std::string_view type;
  if (v.get(obj) || obj["type"].get(type))
    return field_error("response_format", "expected an object with a string \"type\"");
  for (auto [key, value] : obj) {
    (void)value;
    if (key != "type" && key != "json_schema")
      return field_error(fmt::format("response_format.{}", key), "unknown field");
  }
  if (type == "text") return {};
  if (type == "json_object")
    return set_constraint(out, constraint_of(output_constraint::kind::json_object, "response_format"));
  if (type != "json_schema") return field_error("response_format", fmt::format("unknown type '{}'", type));
  simdjson::dom::object js;
  if (obj["json_schema"].get(js))
    return field_error("response_format.json_schema", "is required with type json_schema (an object with a schema)");
  element schema;
  bool has_schema = false;
  for (auto [key, value] : js) {
    if (key == "schema") {
      schema = value;
      has_schema = true;
    } else if (key == "strict") {
      if (value.type() != element_type::BOOL && !is_null(value))
        return field_error("response_format.json_schema.strict", "expected a boolean");
    } else if (key != "name" && key != "description") {
      return field_error(fmt::format("response_format.json_schema.{}", key), "unknown field");
    }
  }
  // Without a schema any JSON object will do.
  if (!has_schema || is_null(schema))
    return set_constraint(out, constraint_of(output_constraint::kind::json_object, "response_format"));
  return read_schema(schema, "response_format.json_schema.schema", out);
}

/// vLLM's structured_outputs: {"json" | "regex" | "choice" | "json_object": ...} plus options
/// that leave the output as this server makes it anyway.
status read_structured_outputs(element v, output_constraint& out) {
  simdjson::dom::object obj;
  if (v.get(obj)) return field_error("structured_outputs", "expected an object");
  for (auto [key, value] : obj) {
    if (is_null(value)) continue;
    const std::string field = fmt::format("structured_outputs.{}", key);
    status st;
    if (key == "json") {
      st = read_schema(value, field, out);
    } else if (key == "regex") {
      st = read_regex(value, field, out);
    } else if (key == "choice") {
      st = read_choices(value, field, out);
    } else if (key == "json_object") {
      bool on = false;
      st = read_bool(value, field, on);
      if (st && on) st = set_constraint(out, constraint_of(output_constraint::kind::json_object, field));
    } else if (key == "disable_any_whitespace" || key == "disable_fallback" || key == "disable_additional_properties") {
      // Whitespace is always compact, there is one engine, and additional properties are
      // generated only when the schema asks for them: either value is what happens.
      bool ignored = false;
      st = read_bool(value, field, ignored);
    } else if (key == "grammar" || key == "structural_tag" || key == "whitespace_pattern") {
      st = unsupported_field(field, "is not supported (use json, regex or choice)");
    } else {
      st = field_error(field, "unknown field");
    }
    if (!st) return st;
  }
  return {};
}

/// guided_decoding_backend: this server has one grammar engine, the same kind as xgrammar.
status read_backend(element v) {
  std::string_view b;
  if (v.get(b)) return field_error("guided_decoding_backend", "expected a string");
  if (b == "auto" || b == "xgrammar") return {};
  return unsupported_field("guided_decoding_backend", fmt::format("'{}' is not available (auto or xgrammar)", b));
}

}  // namespace

status common_fields::read(std::string_view key, element v, bool& handled) {
  handled = true;
  given.temperature |= key == "temperature";
  given.top_p |= key == "top_p";
  given.top_k |= key == "top_k";
  given.min_p |= key == "min_p";
  given.repetition_penalty |= key == "repetition_penalty";
  if (key == "model") return read_string(v, "model", model);
  if (key == "temperature") return read_float(v, "temperature", p.temperature);
  if (key == "top_p") return read_float(v, "top_p", p.top_p);
  if (key == "min_p") return read_float(v, "min_p", p.min_p);
  if (key == "presence_penalty") return read_float(v, "presence_penalty", p.presence_penalty);
  if (key == "frequency_penalty") return read_float(v, "frequency_penalty", p.frequency_penalty);
  if (key == "repetition_penalty") return read_float(v, "repetition_penalty", p.repetition_penalty);
  if (key == "top_k") return read_int32(v, "top_k", kIntMin, kIntMax, p.top_k);
  if (key == "seed") return read_seed(v, p.seed);
  if (key == "stop") return read_stop(v, p.stop);
  if (key == "n") return read_int32(v, "n", kIntMin, kIntMax, p.n);
  if (key == "best_of") {
    best_of_set = true;
    return read_int32(v, "best_of", 1, 128, best_of);
  }
  if (key == "min_tokens") return read_int32(v, "min_tokens", kIntMin, kIntMax, p.min_tokens);
  if (key == "ignore_eos") return read_bool(v, "ignore_eos", p.ignore_eos);
  if (key == "stop_token_ids") return read_token_ids(v, "stop_token_ids", p.stop_token_ids);
  if (key == "logit_bias") return read_logit_bias(v, p.logit_bias);
  if (key == "skip_special_tokens") return read_bool(v, "skip_special_tokens", p.skip_special_tokens);
  if (key == "priority") return read_int32(v, "priority", kIntMin, kIntMax, priority);
  if (key == "response_format") return read_response_format(v, constraint);
  if (key == "guided_json") return read_schema(v, "guided_json", constraint);
  if (key == "guided_regex") return read_regex(v, "guided_regex", constraint);
  if (key == "guided_choice") return read_choices(v, "guided_choice", constraint);
  if (key == "structured_outputs") return read_structured_outputs(v, constraint);
  if (key == "guided_decoding_backend") return read_backend(v);
  if (key == "stream") return read_bool(v, "stream", o.stream);
  if (key == "stream_options") return read_stream_options(v, o);
  if (key == "return_token_ids") return read_bool(v, "return_token_ids", o.return_token_ids);
  if (key == "max_tokens") {
    max_tokens_set = true;
    return read_int32(v, "max_tokens", kIntMin, kIntMax, p.max_tokens);
  }
  handled = false;
  return {};
}

status common_fields::finish() const {
  if (best_of_set && best_of != p.n)
    return unsupported_field("best_of", fmt::format("only best_of equal to n ({}) is supported, got {}", p.n, best_of));
  return {};
}

status finish_params(sampling_params& p, bool max_tokens_set, int32_t provisional_max) {
  const int32_t explicit_max = p.max_tokens;
  if (!max_tokens_set) p.max_tokens = provisional_max;
  if (auto st = validate(p); !st) return st;
  if (max_tokens_set) p.max_tokens = explicit_max;
  return {};
}

}  // namespace actorserve::protocol::openai::detail_common
