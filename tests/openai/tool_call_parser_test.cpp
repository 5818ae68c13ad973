// The tool-call and reasoning parsers on model output text: whole and streamed in pieces of
// every size give the same content, reasoning and calls.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "protocol/chat_output/chat_output_parser.hpp"

namespace actorserve::protocol::chat_output {
namespace {

// DeepSeek-V3's markers (deepseek_calls.hpp).
#define DS_CALLS "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

/// Streams `text` in pieces of `step` bytes (0: whole) and gathers the pieces.
chat_output run(const output_options& o, std::string_view text, size_t step, std::vector<output_piece>* pieces = nullptr) {
  chat_output_parser p(o);
  chat_output out;
  auto take = [&](output_piece&& piece) {
    if (pieces) pieces->push_back(piece);
    out.add(std::move(piece));
  };
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) take(p.push(text.substr(i, step)));
  take(p.finish());
  return out;
}

output_options tools(tool_parser_kind k, bool parallel = true) {
  output_options o;
  o.tools = k;
  o.parallel_tool_calls = parallel;
  return o;
}

/// A reasoning parser, and a tool-call parser over its content.
output_options reasoning(reasoning_parser_kind r, tool_parser_kind t = tool_parser_kind::none) {
  output_options o = tools(t);
  o.reasoning = r;
  return o;
}

struct parse_case {
  const char* name;
  output_options options;
  const char* text;
  const char* content;
  std::vector<std::pair<std::string, std::string>> calls;  ///< (name, arguments)
  const char* reasoning = nullptr;
};

void PrintTo(const parse_case& c, std::ostream* os) { *os << c.name; }

class OutputParsers : public ::testing::TestWithParam<parse_case> {};

TEST_P(OutputParsers, WholeAndEveryPieceSizeAgree) {
  const auto& c = GetParam();
  for (size_t step : {0, 1, 2, 3, 5, 8, 13}) {
    SCOPED_TRACE("piece size " + std::to_string(step));
    chat_output out = run(c.options, c.text, step);
    EXPECT_EQ(out.content, c.content);
    ASSERT_EQ(out.tool_calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, c.calls[i].first);
      EXPECT_EQ(out.tool_calls[i].arguments, c.calls[i].second);
      EXPECT_FALSE(out.tool_calls[i].id.empty());
    }
    if (c.reasoning) {
      ASSERT_TRUE(out.reasoning.has_value());
      EXPECT_EQ(*out.reasoning, c.reasoning);
    } else {
      EXPECT_FALSE(out.reasoning.has_value()) << *out.reasoning;
    }
  }
}

const parse_case kCases[] = {
    {"hermes_one_call", tools(tool_parser_kind::hermes),
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
     {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {"hermes_text_then_two_calls", tools(tool_parser_kind::hermes),
     "Let me check.<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
     "<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>",
     "Let me check.", {{"a", "{\"x\": [1, {\"y\": \"}\"}]}"}, {"b", "{}"}}},
    {"hermes_parallel_off_keeps_the_first", tools(tool_parser_kind::hermes, false),
     "<tool_call>{\"name\": \"a\", \"arguments\": {\"k\": 1}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
     "", {{"a", "{\"k\": 1}"}}},
    {"hermes_plain_text", tools(tool_parser_kind::hermes), "No tools needed <tool here.", "No tools needed <tool here.", {}},
    {"hermes_object_without_name_is_content", tools(tool_parser_kind::hermes), "<tool_call>{\"x\": 1}", "{\"x\": 1}", {}},
    {"hermes_escaped_name", tools(tool_parser_kind::hermes),
     "<tool_call>{\"name\": \"say\\\"hi\", \"arguments\": {\"s\": \"a\\\"b\"}}</tool_call>", "",
     {{"say\"hi", "{\"s\": \"a\\\"b\"}"}}},
    {"hermes_repeated_keys_keep_the_first", tools(tool_parser_kind::hermes),
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"name\": \"g\", \"arguments\": {}}</tool_call>", "",
     {{"f", "{\"a\": 1}"}}},
    {"hermes_empty_name_is_not_a_call", tools(tool_parser_kind::hermes), "<tool_call>{\"name\": \"\", \"arguments\": {}}",
     "{\"name\": \"\", \"arguments\": {}}", {}},
    {"hermes_malformed_after_the_name_keeps_the_call", tools(tool_parser_kind::hermes),
     "<tool_call>{\"name\": \"f\" oops} tail", "oops} tail", {{"f", "{}"}}},
    {"hermes_whitespace_between_and_after_calls_is_dropped", tools(tool_parser_kind::hermes),
     "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> \n <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\n",
     "", {{"a", "{}"}, {"b", "{}"}}},
    {"mistral_array", tools(tool_parser_kind::mistral),
     "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {\"b\": \"c\"}}]", "",
     {{"f", "{\"a\": 1}"}, {"g", "{\"b\": \"c\"}"}}},
    {"mistral_text_before", tools(tool_parser_kind::mistral), "Sure. [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
     "Sure. ", {{"f", "{}"}}},
    {"llama3_json_call", tools(tool_parser_kind::llama3_json),
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {"llama3_json_python_tag_two_calls", tools(tool_parser_kind::llama3_json),
     "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}", "",
     {{"a", "{}"}, {"b", "{\"n\": 2}"}}},
    {"llama3_json_prose_is_content", tools(tool_parser_kind::llama3_json), "The answer is {\"name\": \"x\"}",
     "The answer is {\"name\": \"x\"}", {}},
    {"llama3_json_object_without_name", tools(tool_parser_kind::llama3_json), " {\"answer\": 42} done",
     "{\"answer\": 42} done", {}},
    {"llama3_json_truncated_call_keeps_its_pieces", tools(tool_parser_kind::llama3_json),
     "{\"name\": \"f\", \"parameters\": {\"a\": [1, 2", "", {{"f", "{\"a\": [1, 2"}}},
    {"deepseek_v3_one_call", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DS_CALL_END DS_CALLS_END, "",
     {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {"deepseek_v3_text_then_two_calls", tools(tool_parser_kind::deepseek_v3),
     "Let me check." DS_CALLS DS_CALL "function" DS_SEP "a\n```json\n{\"x\": [1, \"```\"]}\n```" DS_CALL_END "\n"
     DS_CALL "function" DS_SEP "b\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
     "Let me check.", {{"a", "{\"x\": [1, \"```\"]}"}, {"b", "{}"}}},
    {"deepseek_v3_arguments_over_lines", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{\n  \"a\": 1\n}\n```" DS_CALL_END DS_CALLS_END, "",
     {{"f", "{\n  \"a\": 1\n}"}}},
    {"deepseek_v3_parallel_off_keeps_the_first", tools(tool_parser_kind::deepseek_v3, false),
     DS_CALLS DS_CALL "function" DS_SEP "a\n```json\n{\"k\": 1}\n```" DS_CALL_END
     DS_CALL "function" DS_SEP "b\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
     "", {{"a", "{\"k\": 1}"}}},
    {"deepseek_v3_plain_text", tools(tool_parser_kind::deepseek_v3), "No tools <｜tool here.", "No tools <｜tool here.",
     {}},
    {"deepseek_v3_no_separator_is_content", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function\nnope", "function\nnope", {}},
    {"deepseek_v3_empty_name_is_not_a_call", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP " \n```json\n{}\n```", "function" DS_SEP " \n```json\n{}\n```", {}},
    {"deepseek_v3_name_cut_short_is_not_a_call", tools(tool_parser_kind::deepseek_v3),
     "Hi" DS_CALLS DS_CALL "function" DS_SEP "get_wea", "Hifunction" DS_SEP "get_wea", {}},
    {"deepseek_v3_broken_after_the_name_keeps_the_call", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "f\nplain words", "plain words", {{"f", "{}"}}},
    {"deepseek_v3_truncated_arguments_keep_their_pieces", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{\"a\": [1, 2", "", {{"f", "{\"a\": [1, 2"}}},
    {"deepseek_v3_text_after_a_broken_close_is_content", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{}\n```oops", "oops", {{"f", "{}"}}},
    {"deepseek_v3_whitespace_after_the_calls_is_dropped", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS " " DS_CALL "function" DS_SEP "f\n```json\n{}\n``` \n" DS_CALL_END "\n" DS_CALLS_END "\n\n", "",
     {{"f", "{}"}}},
    {"deepseek_v3_text_after_the_calls_is_content", tools(tool_parser_kind::deepseek_v3),
     DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{}\n```" DS_CALL_END DS_CALLS_END " Done.", " Done.", {{"f", "{}"}}},
    {"deepseek_v3_after_deepseek_r1_reasoning",
     reasoning(reasoning_parser_kind::deepseek_r1, tool_parser_kind::deepseek_v3),
     "Weather first.</think>\n\n" DS_CALLS DS_CALL "function" DS_SEP "w\n```json\n{\"a\": [1, 2]}\n```" DS_CALL_END
     DS_CALLS_END,
     "\n\n", {{"w", "{\"a\": [1, 2]}"}}, "Weather first."},
    {"deepseek_r1_reasoning", reasoning(reasoning_parser_kind::deepseek_r1), "Hmm, 2+2.</think>\n\nIt is 4.",
     "\n\nIt is 4.", {}, "Hmm, 2+2."},
    {"deepseek_r1_open_tag_and_no_close", reasoning(reasoning_parser_kind::deepseek_r1), "<think>still thinking", "",
     {}, "still thinking"},
    {"qwen3_reasoning", reasoning(reasoning_parser_kind::qwen3), "<think>\nplan</think>answer", "answer", {}, "\nplan"},
    {"qwen3_without_think_is_content", reasoning(reasoning_parser_kind::qwen3), "just an answer </think>",
     "just an answer </think>", {}},
    {"qwen3_reasoning_then_hermes_call",
     reasoning(reasoning_parser_kind::qwen3, tool_parser_kind::hermes),
     "<think>I need the weather. <tool_call> is how.</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
     "\n\n", {{"w", "{}"}}, "I need the weather. <tool_call> is how."},
};

INSTANTIATE_TEST_SUITE_P(Families, OutputParsers, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(OutputParsers, StreamsNameFirstThenArgumentsInPieces) {
  std::vector<output_piece> pieces;
  const std::string text =
      "Hi<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}</tool_call>";
  run(tools(tool_parser_kind::hermes), text, 4, &pieces);
  std::vector<openai::tool_call_piece> calls;
  for (auto& p : pieces)
    for (auto& c : p.tool_calls) calls.push_back(c);
  ASSERT_GE(calls.size(), 3u) << "arguments should arrive in several pieces";
  EXPECT_EQ(calls[0].index, 0);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_TRUE(calls[0].id.starts_with("call_"));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_TRUE(calls[i].id.empty());
    EXPECT_TRUE(calls[i].name.empty());
  }
  // Content never carries a piece of the marker.
  std::string content;
  for (auto& p : pieces) content += p.content;
  EXPECT_EQ(content, "Hi");
}

TEST(OutputParsers, DeepSeekStreamsNameFirstThenArgumentsInPieces) {
  std::vector<output_piece> pieces;
  const std::string text = "Hi" DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n"
                           "{\"city\": \"Paris\", \"unit\": \"c\"}\n```" DS_CALL_END DS_CALLS_END;
  run(tools(tool_parser_kind::deepseek_v3), text, 4, &pieces);
  std::vector<openai::tool_call_piece> calls;
  std::string content;
  for (auto& p : pieces) {
    content += p.content;
    for (auto& c : p.tool_calls) calls.push_back(c);
  }
  ASSERT_GE(calls.size(), 3u) << "arguments should arrive in several pieces";
  EXPECT_EQ(calls[0].index, 0);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_TRUE(calls[0].id.starts_with("call_"));
  std::string args = calls[0].arguments;
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_TRUE(calls[i].id.empty());
    EXPECT_TRUE(calls[i].name.empty());
    EXPECT_EQ(calls[i].index, 0);
    args += calls[i].arguments;
  }
  EXPECT_EQ(args, "{\"city\": \"Paris\", \"unit\": \"c\"}");  // no piece of the closing fence
  EXPECT_EQ(content, "Hi");  // no piece of a marker
}

TEST(OutputParsers, DeepSeekPiecesOfAnyTextGatherIntoItsWholeParse) {
  // Texts stitched from the format's parts, broken ones included: every piece size gives the
  // whole parse (the property the fuzz target checks on arbitrary bytes).
  const std::vector<std::string> parts = {DS_CALLS, DS_CALLS_END, DS_CALL, DS_CALL_END, DS_SEP, "function", "f",
                                          "\n```json\n", "\n```", "{\"a\": 1}", " ", "\n", "x", "<｜", "```",
                                          "\xef\xbd", "}"};
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = 1 + int(rng() % 14);
    for (int k = 0; k < n; ++k) text += parts[rng() % parts.size()];
    const output_options o = tools(tool_parser_kind::deepseek_v3, round % 3 != 0);
    const chat_output whole = run(o, text, 0);
    for (size_t step : {1, 2, 3, 7}) {
      const chat_output streamed = run(o, text, step);
      ASSERT_EQ(streamed.content, whole.content) << "piece size " << step << ": " << text;
      ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << "piece size " << step << ": " << text;
      for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
        ASSERT_EQ(streamed.tool_calls[i].name, whole.tool_calls[i].name) << text;
        ASSERT_EQ(streamed.tool_calls[i].arguments, whole.tool_calls[i].arguments) << text;
      }
    }
  }
}

TEST(OutputParsers, MistralIdsAreNineAlphanumerics) {
  chat_output out = run(tools(tool_parser_kind::mistral), "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", 0);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].id.size(), 9u);
  for (char c : out.tool_calls[0].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
}

TEST(OutputParsers, CalledToolsOnlyAfterACall) {
  chat_output_parser p(tools(tool_parser_kind::hermes));
  p.push("plain <tool");
  EXPECT_FALSE(p.called_tools());
  p.push("_call>{\"name\": \"f\"");
  EXPECT_TRUE(p.called_tools());
}

}  // namespace
}  // namespace actorserve::protocol::chat_output
