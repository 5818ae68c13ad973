#include "protocol/openai/parse.hpp"

#include <fmt/format.h>

#include <limits>

#include "protocol/openai/json_fields.hpp"

namespace actorserve::protocol::openai {
namespace {

using namespace actorserve::protocol::detail;
constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr int32_t kIntMin = std::numeric_limits<int32_t>::min();

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
    }
  }
  return {};
}

/// Fields both generation endpoints share. Sets `handled` when `key` is one of them.
struct common_fields {
  std::string& model;
  sampling_params& p;
  stream_options& o;
  bool& max_tokens_set;

  status read(std::string_view key, element v, bool& handled) {
    handled = true;
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
    if (key == "min_tokens") return read_int32(v, "min_tokens", kIntMin, kIntMax, p.min_tokens);
    if (key == "ignore_eos") return read_bool(v, "ignore_eos", p.ignore_eos);
    if (key == "stop_token_ids") return read_token_ids(v, "stop_token_ids", p.stop_token_ids);
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
};

status read_prompt(element v, std::vector<prompt_input>& out) {
  out.clear();
  if (v.type() == element_type::STRING) {
    out.push_back({false, std::string(std::string_view(v)), {}});
    return {};
  }
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error("prompt", "expected a string, an array of strings or token ids");
  if (arr.size() == 0) return field_error("prompt", "must not be empty");
  element first = arr.at(0).value_unsafe();
  if (is_integer(first)) {  // one prompt as token ids
    prompt_input p{true, {}, {}};
    if (auto st = read_token_ids(v, "prompt", p.ids); !st) return st;
    out.push_back(std::move(p));
    return {};
  }
  for (element item : arr) {
    prompt_input p;
    if (item.type() == element_type::STRING) {
      p.text.assign(std::string_view(item));
    } else if (item.type() == element_type::ARRAY) {
      p.is_ids = true;
      if (auto st = read_token_ids(item, "prompt", p.ids); !st) return st;
      if (p.ids.empty()) return field_error("prompt", "a token-id prompt must not be empty");
    } else {
      return field_error("prompt", "expected a string, an array of strings or token ids");
    }
    out.push_back(std::move(p));
  }
  return {};
}

status read_content(element v, std::string_view field, std::string& out) {
  out.clear();
  if (is_null(v)) return {};
  if (v.type() == element_type::STRING) {
    out.assign(std::string_view(v));
    return {};
  }
  simdjson::dom::array parts;
  if (v.get(parts)) return field_error(field, "expected a string or an array of content parts");
  size_t j = 0;
  for (element part : parts) {
    const std::string where = fmt::format("{}[{}]", field, j++);
    simdjson::dom::object obj;
    if (part.get(obj)) return field_error(where, "expected a content part object");
    std::string_view type, text;
    if (obj["type"].get(type)) return field_error(where + ".type", "expected a string");
    if (type != "text")
      return make_error(error_code::unsupported,
                        fmt::format("{}.type: content part type '{}' is not supported", where, type));
    if (obj["text"].get(text)) return field_error(where + ".text", "expected a string");
    out.append(text);
  }
  return {};
}

status read_messages(element v, std::vector<chat_message>& out) {
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error("messages", "expected an array of messages");
  if (arr.size() == 0) return field_error("messages", "must not be empty");
  out.clear();
  size_t i = 0;
  for (element item : arr) {
    const std::string where = fmt::format("messages[{}]", i++);
    simdjson::dom::object obj;
    if (item.get(obj)) return field_error(where, "expected an object");
    chat_message m;
    bool has_role = false;
    for (auto [key, value] : obj) {
      if (key == "role") {
        if (auto st = read_string(value, where + ".role", m.role); !st) return st;
        has_role = true;
      } else if (key == "content") {
        if (auto st = read_content(value, where + ".content", m.content); !st) return st;
      } else if (key == "name" && !is_null(value)) {
        if (auto st = read_string(value, where + ".name", m.name); !st) return st;
      } else if (key == "tool_call_id" && !is_null(value)) {
        if (auto st = read_string(value, where + ".tool_call_id", m.tool_call_id); !st) return st;
      }
    }
    if (!has_role) return field_error(where + ".role", "is required");
    if (m.role == "developer") m.role = "system";
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      return field_error(where + ".role",
                         fmt::format("must be system, user, assistant or tool, got '{}'", m.role));
    out.push_back(std::move(m));
  }
  return {};
}

/// Runs config's validation and the checks only the API layer knows.
status finish_params(sampling_params& p, bool max_tokens_set, int32_t provisional_max) {
  const int32_t explicit_max = p.max_tokens;
  if (!max_tokens_set) p.max_tokens = provisional_max;
  if (auto st = validate(p); !st) return st;
  if (max_tokens_set) p.max_tokens = explicit_max;
  return {};
}

}  // namespace

result<completion_request> parse_completion_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  completion_request r;
  common_fields common{r.model, r.params, r.output, r.max_tokens_set};
  bool has_prompt = false;
  for (auto [key, value] : *obj) {
    if (is_null(value)) continue;
    bool handled = false;
    if (auto st = common.read(key, value, handled); !st) return st.err();
    if (handled) continue;
    if (key == "prompt") {
      if (auto st = read_prompt(value, r.prompts); !st) return st.err();
      has_prompt = true;
    } else if (key == "logprobs") {
      if (auto st = read_int32(value, "logprobs", 0, 20, r.params.num_logprobs); !st) return st.err();
      r.logprobs = true;
    } else if (key == "echo") {
      bool echo = false;
      if (auto st = read_bool(value, "echo", echo); !st) return st.err();
      if (echo) return make_error(error_code::unsupported, "echo: echo is not supported");
    }
  }
  if (!has_prompt) return field_error("prompt", "is required");
  if (!r.max_tokens_set) r.params.max_tokens = 16;
  if (auto st = finish_params(r.params, true, 16); !st) return st.err();
  return r;
}

result<chat_request> parse_chat_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  chat_request r;
  common_fields common{r.model, r.params, r.output, r.max_tokens_set};
  bool has_messages = false;
  bool top_logprobs_set = false;
  int32_t top_logprobs = 0;
  for (auto [key, value] : *obj) {
    if (is_null(value)) continue;
    bool handled = false;
    if (auto st = common.read(key, value, handled); !st) return st.err();
    if (handled) continue;
    if (key == "messages") {
      if (auto st = read_messages(value, r.messages); !st) return st.err();
      has_messages = true;
    } else if (key == "max_completion_tokens") {
      r.max_tokens_set = true;
      if (auto st = read_int32(value, "max_completion_tokens", kIntMin, kIntMax, r.params.max_tokens); !st)
        return st.err();
      if (r.params.max_tokens < 1)
        return field_error("max_completion_tokens", fmt::format("must be >= 1, got {}", r.params.max_tokens));
    } else if (key == "logprobs") {
      if (auto st = read_bool(value, "logprobs", r.logprobs); !st) return st.err();
    } else if (key == "top_logprobs") {
      if (auto st = read_int32(value, "top_logprobs", 0, 20, top_logprobs); !st) return st.err();
      top_logprobs_set = true;
    } else if (key == "add_generation_prompt") {
      if (auto st = read_bool(value, "add_generation_prompt", r.add_generation_prompt); !st) return st.err();
    }
  }
  if (!has_messages) return field_error("messages", "is required");
  if (top_logprobs_set && !r.logprobs && top_logprobs > 0)
    return field_error("top_logprobs", "requires logprobs to be true");
  r.params.num_logprobs = r.logprobs ? top_logprobs : -1;
  if (auto st = finish_params(r.params, r.max_tokens_set, std::max(1, r.params.min_tokens)); !st)
    return st.err();
  return r;
}

result<tokenize_request> parse_tokenize_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  tokenize_request r;
  bool has_prompt = false;
  for (auto [key, value] : *obj) {
    if (is_null(value)) continue;
    if (key == "model") {
      if (auto st = read_string(value, "model", r.model); !st) return st.err();
    } else if (key == "prompt") {
      if (auto st = read_string(value, "prompt", r.prompt.text); !st) return st.err();
      has_prompt = true;
    } else if (key == "messages") {
      if (auto st = read_messages(value, r.messages); !st) return st.err();
      r.is_chat = true;
    } else if (key == "add_special_tokens") {
      if (auto st = read_bool(value, "add_special_tokens", r.add_special_tokens); !st) return st.err();
    } else if (key == "add_generation_prompt") {
      if (auto st = read_bool(value, "add_generation_prompt", r.add_generation_prompt); !st) return st.err();
    }
  }
  if (has_prompt == r.is_chat) return field_error("prompt", "give exactly one of prompt or messages");
  return r;
}

result<detokenize_request> parse_detokenize_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  detokenize_request r;
  bool has_tokens = false;
  for (auto [key, value] : *obj) {
    if (is_null(value)) continue;
    if (key == "model") {
      if (auto st = read_string(value, "model", r.model); !st) return st.err();
    } else if (key == "tokens") {
      if (auto st = read_token_ids(value, "tokens", r.tokens); !st) return st.err();
      has_tokens = true;
    }
  }
  if (!has_tokens) return field_error("tokens", "is required");
  return r;
}

std::string_view error_param(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0) return {};
  const std::string_view name = message.substr(0, colon);
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == '[' || c == ']';
    if (!ok) return {};
  }
  return name;
}

}  // namespace actorserve::protocol::openai
