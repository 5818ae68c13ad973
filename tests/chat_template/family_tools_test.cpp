/// Tool-calling templates in the style of Qwen2.5, Llama 3.1 and Mistral v0.3: tojson (with and
/// without indent), tool_calls, selectattr/rejectattr, `for ... in d.items() if ...`, slicing a
/// string, strftime_now. Expected texts written out by hand (and checked against Python jinja2).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "render_helpers.hpp"
#include "test_data.hpp"

using actorserve::testing::apply;

namespace {

/// A template of tests/data/chat_templates/tools/ (the server tests and e2e tests use them too).
std::string tools_template(const std::string& name) {
  std::ifstream in(actorserve::testing::test_data_dir() + "/chat_templates/tools/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const char* kToolConversation = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "tool_calls": [{"id": "abc123def", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
  {"role": "tool", "tool_call_id": "abc123def", "content": "{\"temp\": 21}"}])";
const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

const std::string kQwen25 = tools_template("qwen2.5-instruct.jinja");

TEST(FamilyTools, Qwen25ToolCallsAndResponses) {
  auto out = actorserve::testing::apply(kQwen25, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n"
            R"({"type": "function", "function": {"name": "get_weather", "description": "Get the weather", )"
            R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})"
            "\n</tools><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}"
            "\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(FamilyTools, Qwen25WithoutTools) {
  auto out = actorserve::testing::apply(kQwen25, R"([{"role": "user", "content": "Hi"}])");
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

const std::string kLlama31 = tools_template("llama-3.1-instruct.jinja");

TEST(FamilyTools, Llama31IndentedToolJsonAndFixedDate) {
  auto out = actorserve::testing::apply(kLlama31, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nYou have access to the following functions:\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
            "        \"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
            "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n"
            "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
            "        }\n    }\n}\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", "
            "\"unit\": \"c\"}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(FamilyTools, Llama31SystemMessageIsTrimmedAndMessagesReassigned) {
  auto out = actorserve::testing::apply(kLlama31, R"([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi "}])", "null",
                   false);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

const std::string kMistralV3 = tools_template("mistral-7b-instruct-v0.3.jinja");

TEST(FamilyTools, MistralV3AvailableToolsAndToolCalls) {
  auto out = actorserve::testing::apply(kMistralV3, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the "
            "weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
            "[\"city\"]}}}][/AVAILABLE_TOOLS][INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abc123def\"}]</s>"
            "[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": \"abc123def\"}[/TOOL_RESULTS]");
}

TEST(FamilyTools, MistralV3SystemGoesToLastUserTurn) {
  auto out = actorserve::testing::apply(kMistralV3, R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there "},
      {"role": "assistant", "content": " Hello!"}, {"role": "user", "content": "Weather in Paris?"}])");
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, "<s>[INST] Hi there [/INST] Hello!</s>[INST] You are terse.\n\nWeather in Paris?[/INST]");
  auto bad = actorserve::testing::apply(kMistralV3, R"([{"role": "assistant", "content": "first"}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().message,
            "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
}

}  // namespace
