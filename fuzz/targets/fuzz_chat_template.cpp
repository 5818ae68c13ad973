// Chat templates (the Jinja subset of Hugging Face chat_template strings): the input is the
// template source. It is parsed, then rendered with tight limits against two fixed contexts (a
// full conversation with tools, and an empty one), as transformers' apply_chat_template would.
// Either an error, or output within the limits.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "protocol/chat_template/chat_template.hpp"

using actorserve::protocol::chat_template;
using actorserve::protocol::chat_template_limits;
using actorserve::protocol::chat_value;

namespace {

chat_value full_context() {
  auto tool_call = chat_value::make_object(
      {{"id", "call_1"},
       {"type", "function"},
       {"function", chat_value::make_object({{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}})}});
  auto parts = chat_value::make_array({chat_value::make_object({{"type", "text"}, {"text", "What is "}}),
                                       chat_value::make_object({{"type", "text"}, {"text", "this?"}})});
  auto messages = chat_value::make_array(
      {chat_value::message("system", "You are helpful."), chat_value::message("user", "Hi \xE6\x97\xA5 <s>"),
       chat_value::make_object({{"role", "assistant"}, {"content", ""}, {"tool_calls", chat_value::make_array({tool_call})}}),
       chat_value::make_object({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 21.5}"}}),
       chat_value::message("assistant", "It is 21.5 degrees."),
       chat_value::make_object({{"role", "user"}, {"content", parts}})});
  auto tool = chat_value::make_object(
      {{"type", "function"},
       {"function", chat_value::make_object(
                        {{"name", "get_weather"},
                         {"description", "Weather of a city"},
                         {"parameters", chat_value::make_object(
                                            {{"type", "object"},
                                             {"properties", chat_value::make_object(
                                                                {{"city", chat_value::make_object({{"type", "string"}})}})},
                                             {"required", chat_value::make_array({"city"})}})}})}});
  return chat_value::make_object({{"messages", messages},
                                  {"tools", chat_value::make_array({tool})},
                                  {"documents", nullptr},
                                  {"add_generation_prompt", true},
                                  {"bos_token", "<s>"},
                                  {"eos_token", "</s>"},
                                  {"enable_thinking", false},
                                  {"max_count", 3},
                                  {"ratio", 0.5}});
}

chat_value empty_context() {
  return chat_value::make_object({{"messages", chat_value::make_array({})},
                                  {"tools", nullptr},
                                  {"documents", nullptr},
                                  {"add_generation_prompt", false}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tpl = chat_template::parse(actorserve::fuzz::as_text(data, size));
  if (!tpl) return 0;
  static const chat_value contexts[] = {full_context(), empty_context()};
  chat_template_limits limits;
  limits.max_output_bytes = 64u << 10;
  limits.max_items = 4096;
  limits.max_steps = 20'000;
  limits.max_call_depth = 16;
  for (const auto& ctx : contexts) {
    auto out = tpl->render(ctx, limits);
    if (out) FUZZ_CHECK(out->size() <= limits.max_output_bytes, "output of %zu bytes passed the limit", out->size());
  }
  return 0;
}
