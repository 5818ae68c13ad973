// Walks every documented field of OpenAI's chat-completions and completions requests (and the
// vLLM extras the server reads): each one either changes the parsed request as documented or is
// refused with an error that names it. Nothing is ignored silently.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "protocol/openai/parse.hpp"

namespace actorserve::protocol::openai {
namespace {

/// One field: a body fragment, and either what it changes or that it is refused.
struct chat_field {
  const char* name;
  const char* fragment;                                  ///< `"field": value`
  std::function<bool(const chat_request&)> honoured;     ///< null: refused
  error_code refused_as = error_code::unsupported;
};

struct completion_field {
  const char* name;
  const char* fragment;
  std::function<bool(const completion_request&)> honoured;
  error_code refused_as = error_code::unsupported;
};

void PrintTo(const chat_field& f, std::ostream* os) { *os << f.name << " (" << f.fragment << ")"; }
void PrintTo(const completion_field& f, std::ostream* os) { *os << f.name << " (" << f.fragment << ")"; }

constexpr const char* kMessages = R"("messages": [{"role": "user", "content": "hi"}])";

std::string name_of(const char* name) {
  std::string out;
  for (const char* c = name; *c; ++c) out += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  return out;
}

/// The field changed the parsed request as documented, or was refused with an error naming it.
template <class Field, class Request>
void expect_honoured_or_refused(const Field& f, const result<Request>& r) {
  if (f.honoured) {
    ASSERT_TRUE(r.ok()) << r.err().message;
    EXPECT_TRUE(f.honoured(*r)) << f.fragment << " did not change the request";
    return;
  }
  ASSERT_FALSE(r.ok()) << f.fragment << " was accepted";
  EXPECT_EQ(r.err().code, f.refused_as) << r.err().message;
  EXPECT_EQ(error_param(r.err().message).substr(0, std::string_view(f.name).size()), f.name) << r.err().message;
}

class ChatFieldWalk : public ::testing::TestWithParam<chat_field> {};

TEST_P(ChatFieldWalk, IsHonouredOrRefusedByName) {
  expect_honoured_or_refused(GetParam(), parse_chat_request(std::string("{") + kMessages + ", " + GetParam().fragment + "}"));
}

const chat_field kChatFields[] = {
    // OpenAI's chat-completions request, in the order of its reference.
    {"messages", R"("add_generation_prompt": true)", [](const chat_request& r) { return r.messages[0].content == "hi"; }},
    {"model", R"("model": "tiny")", [](const chat_request& r) { return r.model == "tiny"; }},
    {"audio", R"("audio": {"voice": "alloy", "format": "mp3"})", nullptr},
    {"frequency_penalty", R"("frequency_penalty": 0.5)", [](const chat_request& r) { return r.params.frequency_penalty == 0.5f; }},
    {"function_call", R"("function_call": "auto")", nullptr},
    {"functions", R"("functions": [{"name": "f"}])", nullptr},
    {"logit_bias", R"("logit_bias": {"5": 250, "7": -3.5})",
     [](const chat_request& r) {
       return r.params.logit_bias == std::vector<std::pair<int32_t, float>>{{5, 100.0f}, {7, -3.5f}};
     }},
    {"logit_bias", R"("logit_bias": {"five": 1})", nullptr, error_code::invalid_argument},
    {"logit_bias", R"("logit_bias": {"-1": 1})", nullptr, error_code::invalid_argument},
    {"logit_bias", R"("logit_bias": {"3": "x"})", nullptr, error_code::invalid_argument},
    {"logprobs", R"("logprobs": true)", [](const chat_request& r) { return r.logprobs && r.params.num_logprobs == 0; }},
    {"max_completion_tokens", R"("max_completion_tokens": 7)", [](const chat_request& r) { return r.params.max_tokens == 7; }},
    {"max_tokens", R"("max_tokens": 9)", [](const chat_request& r) { return r.max_tokens_set && r.params.max_tokens == 9; }},
    {"metadata", R"("metadata": {"k": "v"})", nullptr},
    {"metadata", R"("metadata": {})", [](const chat_request&) { return true; }},
    {"modalities", R"("modalities": ["text", "audio"])", nullptr},
    {"modalities", R"("modalities": ["text"])", [](const chat_request&) { return true; }},
    {"n", R"("n": 3)", [](const chat_request& r) { return r.params.n == 3; }},
    {"parallel_tool_calls", R"("parallel_tool_calls": false)", [](const chat_request& r) { return !r.parallel_tool_calls; }},
    {"prediction", R"("prediction": {"type": "content", "content": "x"})", nullptr},
    {"presence_penalty", R"("presence_penalty": -1)", [](const chat_request& r) { return r.params.presence_penalty == -1.0f; }},
    {"prompt_cache_key", R"("prompt_cache_key": "k")", [](const chat_request&) { return true; }},
    {"reasoning_effort", R"("reasoning_effort": "low")", nullptr},
    {"response_format", R"("response_format": {"type": "text"})", [](const chat_request&) { return true; }},
    {"response_format", R"("response_format": {"type": "json_object"})",
     [](const chat_request& r) { return r.constraint.type == output_constraint::kind::json_object; }},
    {"response_format", R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
      "schema": {"type": "object"}}})",
     [](const chat_request& r) {
       return r.constraint.type == output_constraint::kind::json_schema && r.constraint.text == R"({"type":"object"})" &&
              r.constraint.field == "response_format.json_schema.schema";
     }},
    {"response_format.json_schema", R"("response_format": {"type": "json_schema"})", nullptr,
     error_code::invalid_argument},
    {"response_format.json_schema.format", R"("response_format": {"type": "json_schema", "json_schema": {"format": 1}})",
     nullptr, error_code::invalid_argument},
    {"safety_identifier", R"("safety_identifier": "u1")", [](const chat_request&) { return true; }},
    {"seed", R"("seed": 42)", [](const chat_request& r) { return r.params.seed == 42u; }},
    {"service_tier", R"("service_tier": "flex")", nullptr},
    {"service_tier", R"("service_tier": "auto")", [](const chat_request&) { return true; }},
    {"stop", R"("stop": ["a", "b"])", [](const chat_request& r) { return r.params.stop.size() == 2; }},
    {"store", R"("store": true)", nullptr},
    {"store", R"("store": false)", [](const chat_request&) { return true; }},
    {"stream", R"("stream": true)", [](const chat_request& r) { return r.output.stream; }},
    {"stream_options", R"("stream_options": {"include_usage": true})", [](const chat_request& r) { return r.output.include_usage; }},
    {"stream_options.include_obfuscation", R"("stream_options": {"include_obfuscation": true})", nullptr},
    {"temperature", R"("temperature": 0.25)", [](const chat_request& r) { return r.params.temperature == 0.25f && r.given.temperature; }},
    {"tool_choice", R"("tool_choice": "none")", [](const chat_request& r) { return r.tool_choice == tool_choice_mode::none; }},
    {"tool_choice", R"("tool_choice": "required")",
     [](const chat_request& r) { return r.tool_choice == tool_choice_mode::required; }},
    {"tool_choice", R"("tool_choice": {"type": "function", "function": {"name": "f"}})",
     [](const chat_request& r) { return r.tool_choice == tool_choice_mode::function && r.tool_choice_function == "f"; }},
    {"tool_choice", R"("tool_choice": {"type": "function"})", nullptr, error_code::invalid_argument},
    {"tools", R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])",
     [](const chat_request& r) { return r.tools.is_array() && r.tools.as_array().size() == 1; }},
    {"tools", R"("tools": [{"type": "custom", "custom": {"name": "f"}}])", nullptr},
    {"top_logprobs", R"("logprobs": true, "top_logprobs": 4)", [](const chat_request& r) { return r.params.num_logprobs == 4; }},
    {"top_p", R"("top_p": 0.5)", [](const chat_request& r) { return r.params.top_p == 0.5f && r.given.top_p; }},
    {"user", R"("user": "u1")", [](const chat_request&) { return true; }},
    {"verbosity", R"("verbosity": "low")", nullptr},
    {"web_search_options", R"("web_search_options": {})", nullptr},
    // vLLM's extras.
    {"best_of", R"("n": 2, "best_of": 2)", [](const chat_request& r) { return r.params.n == 2; }},
    {"best_of", R"("best_of": 3)", nullptr},
    {"top_k", R"("top_k": 5)", [](const chat_request& r) { return r.params.top_k == 5 && r.given.top_k; }},
    {"min_p", R"("min_p": 0.1)", [](const chat_request& r) { return r.params.min_p == 0.1f; }},
    {"repetition_penalty", R"("repetition_penalty": 1.2)", [](const chat_request& r) { return r.params.repetition_penalty == 1.2f; }},
    {"min_tokens", R"("min_tokens": 2)", [](const chat_request& r) { return r.params.min_tokens == 2; }},
    {"ignore_eos", R"("ignore_eos": true)", [](const chat_request& r) { return r.params.ignore_eos; }},
    {"stop_token_ids", R"("stop_token_ids": [3])", [](const chat_request& r) { return r.params.stop_token_ids.size() == 1; }},
    {"skip_special_tokens", R"("skip_special_tokens": false)", [](const chat_request& r) { return !r.params.skip_special_tokens; }},
    {"priority", R"("priority": -2)", [](const chat_request& r) { return r.priority == -2; }},
    {"return_token_ids", R"("return_token_ids": true)", [](const chat_request& r) { return r.output.return_token_ids; }},
    {"add_generation_prompt", R"("add_generation_prompt": false)", [](const chat_request& r) { return !r.add_generation_prompt; }},
    {"add_special_tokens", R"("add_special_tokens": true)", [](const chat_request& r) { return r.add_special_tokens; }},
    {"chat_template_kwargs", R"("chat_template_kwargs": {"enable_thinking": false})",
     [](const chat_request& r) { return r.chat_template_kwargs.find("enable_thinking") != nullptr; }},
    {"documents", R"("documents": [{"title": "t", "text": "x"}])", [](const chat_request& r) { return r.documents.is_array(); }},
    {"chat_template", R"("chat_template": "{{ messages }}")", nullptr},
    {"continue_final_message", R"("continue_final_message": true)", nullptr},
    {"echo", R"("echo": true)", nullptr},
    {"use_beam_search", R"("use_beam_search": true)", nullptr},
    {"length_penalty", R"("length_penalty": 2.0)", nullptr},
    {"include_stop_str_in_output", R"("include_stop_str_in_output": true)", nullptr},
    {"spaces_between_special_tokens", R"("spaces_between_special_tokens": false)", nullptr},
    {"truncate_prompt_tokens", R"("truncate_prompt_tokens": 5)", nullptr},
    {"prompt_logprobs", R"("prompt_logprobs": 1)", nullptr},
    {"allowed_token_ids", R"("allowed_token_ids": [1, 2])", nullptr},
    {"bad_words", R"("bad_words": ["x"])", nullptr},
    {"guided_json", R"("guided_json": {"type": "object"})",
     [](const chat_request& r) { return r.constraint.type == output_constraint::kind::json_schema; }},
    {"guided_json", R"("guided_json": "{\"type\": \"integer\"}")",
     [](const chat_request& r) { return r.constraint.text == R"({"type": "integer"})"; }},
    {"guided_regex", R"("guided_regex": "a+")",
     [](const chat_request& r) { return r.constraint.type == output_constraint::kind::regex && r.constraint.text == "a+"; }},
    {"guided_choice", R"("guided_choice": ["a", "b"])",
     [](const chat_request& r) { return r.constraint.choices == std::vector<std::string>{"a", "b"}; }},
    {"guided_choice", R"("guided_choice": [])", nullptr, error_code::invalid_argument},
    {"guided_grammar", R"("guided_grammar": "root ::= x")", nullptr},
    {"guided_whitespace_pattern", R"("guided_whitespace_pattern": " *")", nullptr},
    {"guided_decoding_backend", R"("guided_decoding_backend": "xgrammar")", [](const chat_request&) { return true; }},
    {"guided_decoding_backend", R"("guided_decoding_backend": "outlines")", nullptr},
    {"structured_outputs", R"("structured_outputs": {"json": {}})",
     [](const chat_request& r) { return r.constraint.field == "structured_outputs.json"; }},
    {"structured_outputs", R"("structured_outputs": {"choice": ["x"], "disable_any_whitespace": true})",
     [](const chat_request& r) { return r.constraint.type == output_constraint::kind::choice; }},
    {"structured_outputs.json_object", R"("structured_outputs": {"json_object": true})",
     [](const chat_request& r) { return r.constraint.type == output_constraint::kind::json_object; }},
    {"structured_outputs.grammar", R"("structured_outputs": {"grammar": "root ::= x"})", nullptr},
    {"structured_outputs.nope", R"("structured_outputs": {"nope": 1})", nullptr, error_code::invalid_argument},
    {"guided_regex", R"("guided_json": {}, "guided_regex": "a")", nullptr},
    {"request_id", R"("request_id": "r1")", nullptr},
    {"mm_processor_kwargs", R"("mm_processor_kwargs": {"a": 1})", nullptr},
    {"not_a_field", R"("not_a_field": 1)", nullptr, error_code::invalid_argument},
    {"messages[0].function_call", R"("messages": [{"role": "assistant", "function_call": {}}])", nullptr,
     error_code::invalid_argument},
};

INSTANTIATE_TEST_SUITE_P(OpenAiAndVllm, ChatFieldWalk, ::testing::ValuesIn(kChatFields),
                         [](const auto& info) { return name_of(info.param.name) + "_" + std::to_string(info.index); });

class CompletionFieldWalk : public ::testing::TestWithParam<completion_field> {};

TEST_P(CompletionFieldWalk, IsHonouredOrRefusedByName) {
  expect_honoured_or_refused(GetParam(), parse_completion_request(std::string(R"({"prompt": "hi", )") + GetParam().fragment + "}"));
}

const completion_field kCompletionFields[] = {
    // OpenAI's completions request.
    {"model", R"("model": "tiny")", [](const completion_request& r) { return r.model == "tiny"; }},
    {"best_of", R"("best_of": 1)", [](const completion_request& r) { return r.params.n == 1; }},
    {"best_of", R"("n": 1, "best_of": 4)", nullptr},
    {"echo", R"("echo": true)", nullptr},
    {"echo", R"("echo": false)", [](const completion_request&) { return true; }},
    {"frequency_penalty", R"("frequency_penalty": 1)", [](const completion_request& r) { return r.params.frequency_penalty == 1.0f; }},
    {"logit_bias", R"("logit_bias": {"12": -100})",
     [](const completion_request& r) { return r.params.logit_bias.size() == 1 && r.params.logit_bias[0].second == -100.0f; }},
    {"logprobs", R"("logprobs": 2)", [](const completion_request& r) { return r.logprobs && r.params.num_logprobs == 2; }},
    {"max_tokens", R"("max_tokens": 5)", [](const completion_request& r) { return r.params.max_tokens == 5; }},
    {"n", R"("n": 2)", [](const completion_request& r) { return r.params.n == 2; }},
    {"presence_penalty", R"("presence_penalty": 1)", [](const completion_request& r) { return r.params.presence_penalty == 1.0f; }},
    {"seed", R"("seed": 7)", [](const completion_request& r) { return r.params.seed == 7u; }},
    {"stop", R"("stop": "x")", [](const completion_request& r) { return r.params.stop.size() == 1; }},
    {"stream", R"("stream": true)", [](const completion_request& r) { return r.output.stream; }},
    {"stream_options", R"("stream_options": {"include_usage": true})", [](const completion_request& r) { return r.output.include_usage; }},
    {"suffix", R"("suffix": "end")", nullptr},
    {"suffix", R"("suffix": "")", [](const completion_request&) { return true; }},
    {"temperature", R"("temperature": 0)", [](const completion_request& r) { return r.params.greedy(); }},
    {"top_p", R"("top_p": 0.9)", [](const completion_request& r) { return r.params.top_p == 0.9f; }},
    {"user", R"("user": "u")", [](const completion_request&) { return true; }},
    // vLLM's extras.
    {"add_special_tokens", R"("add_special_tokens": false)", [](const completion_request& r) { return !r.add_special_tokens; }},
    {"response_format", R"("response_format": {"type": "json_object"})",
     [](const completion_request& r) { return r.constraint.type == output_constraint::kind::json_object; }},
    {"guided_json", R"("guided_json": {})",
     [](const completion_request& r) { return r.constraint.type == output_constraint::kind::json_schema; }},
    {"guided_choice", R"("guided_choice": ["yes", "no"])",
     [](const completion_request& r) { return r.constraint.choices.size() == 2; }},
    {"tools", R"("tools": [])", nullptr, error_code::invalid_argument},
    {"chat_template_kwargs", R"("chat_template_kwargs": {})", nullptr, error_code::invalid_argument},
};

INSTANTIATE_TEST_SUITE_P(OpenAiAndVllm, CompletionFieldWalk, ::testing::ValuesIn(kCompletionFields),
                         [](const auto& info) { return name_of(info.param.name) + "_" + std::to_string(info.index); });

TEST(FieldWalk, OneConstraintPerRequest) {
  auto r = parse_chat_request(std::string("{") + kMessages +
                              R"(, "response_format": {"type": "json_object"}, "guided_choice": ["a"]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_param(r.err().message), "guided_choice") << r.err().message;
  EXPECT_NE(r.err().message.find("response_format"), std::string::npos) << r.err().message;
  auto tools = parse_chat_request(std::string("{") + kMessages + R"(, "tools": [{"type": "function", "function":
    {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]})");
  ASSERT_TRUE(tools.ok()) << tools.err().message;
  ASSERT_EQ(tools->tool_functions.size(), 1u);
  EXPECT_EQ(tools->tool_functions[0].name, "f");
  EXPECT_EQ(tools->tool_functions[0].parameters_json, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
}

TEST(FieldWalk, AssistantToolCallsReachTemplatesWithDecodedArguments) {
  auto r = parse_chat_request(R"({"messages": [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  const auto& calls = r->messages[1].tool_calls;
  ASSERT_TRUE(calls.is_array());
  const chat_value* fn = calls.as_array()[0].find("function");
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn->find("name")->as_string(), "get_weather");
  EXPECT_EQ(fn->find("arguments")->find("city")->as_string(), "Paris");
  EXPECT_EQ(r->messages[2].tool_call_id, "call_1");

  auto bad = parse_chat_request(R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
    "function": {"name": "f", "arguments": "{not json"}}]}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(error_param(bad.err().message), "messages[0].tool_calls[0].function.arguments");
}

TEST(FieldWalk, GenerationDefaultsFillOnlyUnsetFields) {
  generation_defaults d;
  d.temperature = 0.6;
  d.top_p = 0.9;
  d.top_k = 20;
  auto r = parse_chat_request(std::string("{") + kMessages + R"(, "temperature": 1.0})");
  ASSERT_TRUE(r.ok());
  apply_generation_defaults(r->params, r->given, d);
  EXPECT_EQ(r->params.temperature, 1.0f);  // the request's own value wins
  EXPECT_EQ(r->params.top_p, 0.9f);
  EXPECT_EQ(r->params.top_k, 20);
  EXPECT_EQ(r->params.min_p, 0.0f);        // not in the file: OpenAI's default
}

}  // namespace
}  // namespace actorserve::protocol::openai
