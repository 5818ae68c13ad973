#pragma once
/// Test helpers: render a template source against JSON-written inputs.
#include <gtest/gtest.h>

#include <string>

#include "json_input.hpp"
#include "protocol/chat_template/chat_template.hpp"

namespace actorserve::testing {

/// The date Hugging Face's reference environment fixes strftime_now at: 2024-07-26 00:00 UTC.
inline constexpr std::int64_t kReferenceTime = 1721952000;

/// Limits with strftime_now fixed at kReferenceTime.
inline protocol::chat_template_limits reference_limits(protocol::chat_template_limits limits = {}) {
  limits.fixed_time = kReferenceTime;
  return limits;
}

/// Renders `source` with `context_json` (a JSON object of variables); fails the test on error.
inline std::string render_ok(const std::string& source, const std::string& context_json = "{}") {
  auto tpl = protocol::chat_template::parse(source);
  EXPECT_TRUE(tpl.ok()) << (tpl.ok() ? "" : tpl.err().message);
  if (!tpl.ok()) return "<parse error>";
  auto out = tpl->render(parse_json(context_json), reference_limits());
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.err().message);
  return out.ok() ? *out : "<render error: " + out.err().message + ">";
}

/// Renders and expects failure; returns the error (parse or render).
inline error render_err(const std::string& source, const std::string& context_json = "{}",
                        const protocol::chat_template_limits& limits = {}) {
  auto tpl = protocol::chat_template::parse(source);
  if (!tpl.ok()) return tpl.err();
  auto out = tpl->render(parse_json(context_json), reference_limits(limits));
  EXPECT_FALSE(out.ok()) << "rendered: " << (out.ok() ? *out : "");
  return out.ok() ? error{} : out.err();
}

/// transformers-style inputs: messages and tools as JSON, <s>/</s> special tokens.
inline result<std::string> apply(const std::string& source, const std::string& messages_json,
                                 const std::string& tools_json = "null", bool add_generation_prompt = true) {
  auto tpl = protocol::chat_template::parse(source);
  if (!tpl.ok()) return tpl.err();
  protocol::chat_template_inputs in;
  in.messages = parse_json(messages_json).as_array();
  in.tools = parse_json(tools_json);
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.fixed_time = kReferenceTime;
  return protocol::apply_chat_template(*tpl, in);
}

}  // namespace actorserve::testing
