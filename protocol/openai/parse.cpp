#include "protocol/openai/parse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "protocol/openai/common_fields.hpp"
#include "protocol/openai/field_policy.hpp"

namespace actorserve::protocol::openai {
namespace {

using namespace actorserve::protocol::detail;
using detail_common::common_fields;

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

}  // namespace

result<completion_request> parse_completion_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  completion_request r;
  common_fields common{r.model, r.params, r.output, r.max_tokens_set, r.given, r.priority, r.constraint};
  bool has_prompt = false;
  auto own = [&](std::string_view key, element value) -> result<bool> {
    status st;
    if (key == "prompt") {
      st = read_prompt(value, r.prompts);
      has_prompt = true;
    } else if (key == "logprobs") {
      st = read_int32(value, "logprobs", 0, 20, r.params.num_logprobs);
      r.logprobs = true;
    } else if (key == "add_special_tokens") {
      st = read_bool(value, "add_special_tokens", r.add_special_tokens);
    } else {
      return false;
    }
    if (!st) return st.err();
    return true;
  };
  if (auto st = detail_common::read_body(*obj, common, endpoint::completions, own); !st) return st.err();
  if (!has_prompt) return field_error("prompt", "is required");
  if (auto st = common.finish(); !st) return st.err();
  if (!r.max_tokens_set) r.params.max_tokens = 16;
  if (auto st = detail_common::finish_params(r.params, true, 16); !st) return st.err();
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
      if (auto st = detail_common::read_messages(value, r.messages); !st) return st.err();
      r.is_chat = true;
    } else if (key == "tools") {
      std::vector<tool_function> functions;
      if (auto st = detail_common::read_tools(value, r.tools, functions); !st) return st.err();
    } else if (key == "chat_template_kwargs") {
      if (auto st = detail_common::read_template_kwargs(value, r.chat_template_kwargs); !st) return st.err();
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

void apply_generation_defaults(sampling_params& p, const given_fields& given, const generation_defaults& d) {
  if (!given.temperature && d.temperature) p.temperature = static_cast<float>(*d.temperature);
  if (!given.top_p && d.top_p) p.top_p = static_cast<float>(*d.top_p);
  if (!given.top_k && d.top_k) p.top_k = static_cast<int32_t>(std::clamp<int64_t>(*d.top_k, -1, INT32_MAX));
  if (!given.min_p && d.min_p) p.min_p = static_cast<float>(*d.min_p);
  if (!given.repetition_penalty && d.repetition_penalty) p.repetition_penalty = static_cast<float>(*d.repetition_penalty);
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
