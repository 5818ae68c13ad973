// POST /v1/chat/completions: the body into a chat_request.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "protocol/openai/common_fields.hpp"
#include "protocol/openai/field_policy.hpp"
#include "protocol/openai/parse.hpp"

namespace actorserve::protocol::openai {
namespace {

using namespace actorserve::protocol::detail;
using detail_common::common_fields;

/// "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}.
status read_tool_choice(element v, chat_request& r) {
  if (v.type() == element_type::OBJECT) {
    std::string_view type, name;
    simdjson::dom::object fn;
    if (v["type"].get(type) || type != "function" || v["function"].get(fn) || fn["name"].get(name) || name.empty())
      return field_error("tool_choice", R"(expected {"type": "function", "function": {"name": ...}})");
    r.tool_choice = tool_choice_mode::function;
    r.tool_choice_function = std::string(name);
    return {};
  }
  std::string_view mode;
  if (v.get(mode)) return field_error("tool_choice", "expected \"auto\", \"none\", \"required\" or an object");
  if (mode == "auto") r.tool_choice = tool_choice_mode::automatic;
  else if (mode == "none") r.tool_choice = tool_choice_mode::none;
  else if (mode == "required") r.tool_choice = tool_choice_mode::required;
  else return field_error("tool_choice", fmt::format("must be auto, none or required, got '{}'", mode));
  return {};
}

/// The chat-only fields; false when `key` is none of them.
result<bool> read_chat_field(std::string_view key, element value, chat_request& r, int32_t& top_logprobs,
                             bool& top_logprobs_set, bool& has_messages) {
  constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kIntMin = std::numeric_limits<int32_t>::min();
  status st;
  if (key == "messages") {
    st = detail_common::read_messages(value, r.messages);
    has_messages = true;
  } else if (key == "max_completion_tokens") {
    r.max_tokens_set = true;
    st = read_int32(value, "max_completion_tokens", kIntMin, kIntMax, r.params.max_tokens);
    if (st && r.params.max_tokens < 1)
      return field_error("max_completion_tokens", fmt::format("must be >= 1, got {}", r.params.max_tokens));
  } else if (key == "logprobs") {
    st = read_bool(value, "logprobs", r.logprobs);
  } else if (key == "top_logprobs") {
    st = read_int32(value, "top_logprobs", 0, 20, top_logprobs);
    top_logprobs_set = true;
  } else if (key == "add_generation_prompt") {
    st = read_bool(value, "add_generation_prompt", r.add_generation_prompt);
  } else if (key == "add_special_tokens") {
    st = read_bool(value, "add_special_tokens", r.add_special_tokens);
  } else if (key == "tools") {
    st = detail_common::read_tools(value, r.tools, r.tool_functions);
  } else if (key == "tool_choice") {
    st = read_tool_choice(value, r);
  } else if (key == "parallel_tool_calls") {
    st = read_bool(value, "parallel_tool_calls", r.parallel_tool_calls);
  } else if (key == "chat_template_kwargs") {
    st = detail_common::read_template_kwargs(value, r.chat_template_kwargs);
  } else if (key == "documents") {
    if (value.type() != element_type::ARRAY) return field_error("documents", "expected an array");
    r.documents = to_chat_value(value);
  } else {
    return false;
  }
  if (!st) return st.err();
  return true;
}

}  // namespace

result<chat_request> parse_chat_request(std::string_view body) {
  auto obj = parse_object(body);
  if (!obj) return obj.err();
  chat_request r;
  common_fields common{r.model, r.params, r.output, r.max_tokens_set, r.given, r.priority, r.constraint};
  bool has_messages = false;
  bool top_logprobs_set = false;
  int32_t top_logprobs = 0;
  auto own = [&](std::string_view key, element value) {
    return read_chat_field(key, value, r, top_logprobs, top_logprobs_set, has_messages);
  };
  if (auto st = detail_common::read_body(*obj, common, endpoint::chat, own); !st) return st.err();
  if (!has_messages) return field_error("messages", "is required");
  if (auto st = common.finish(); !st) return st.err();
  if (top_logprobs_set && !r.logprobs && top_logprobs > 0)
    return field_error("top_logprobs", "requires logprobs to be true");
  r.params.num_logprobs = r.logprobs ? top_logprobs : -1;
  if (auto st = detail_common::finish_params(r.params, r.max_tokens_set, std::max(1, r.params.min_tokens)); !st)
    return st.err();
  return r;
}

}  // namespace actorserve::protocol::openai
