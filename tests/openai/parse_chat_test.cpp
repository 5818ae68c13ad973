#include <gtest/gtest.h>

#include "protocol/openai/parse.hpp"

namespace actorserve::protocol::openai {
namespace {

TEST(ParseChat, ReadsMessagesAndFields) {
  auto r = parse_chat_request(R"({
    "model": "tiny",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "name": "bot"},
      {"role": "tool", "content": "42", "tool_call_id": "call_1"},
      {"role": "developer", "content": "dev"}],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3, "temperature": 0,
    "seed": -1, "stop": "x", "n": 2, "stream": true, "stream_options": {"include_usage": false},
    "add_generation_prompt": false, "tools": []})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->messages.size(), 5u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be brief.");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(r->messages[2].name, "bot");
  EXPECT_EQ(r->messages[3].tool_call_id, "call_1");
  EXPECT_EQ(r->messages[4].role, "system");
  EXPECT_TRUE(r->max_tokens_set);
  EXPECT_EQ(r->params.max_tokens, 9);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.num_logprobs, 3);
  EXPECT_TRUE(r->params.greedy());
  EXPECT_EQ(r->params.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(r->params.n, 2);
  EXPECT_TRUE(r->output.stream);
  EXPECT_FALSE(r->output.include_usage);
  EXPECT_FALSE(r->add_generation_prompt);
}

TEST(ParseChat, MaxTokensIsAnAliasAndDefaultsAreUnset) {
  auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->max_tokens_set);
  EXPECT_EQ(r->params.max_tokens, 4);
  auto d = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->max_tokens_set);
  EXPECT_FALSE(d->logprobs);
  EXPECT_EQ(d->params.num_logprobs, -1);
  EXPECT_TRUE(d->add_generation_prompt);
}

/// Without max_tokens the bound of min_tokens is the server's (the room left in the context), so
/// any min_tokens >= 0 parses, while an explicit max_tokens below it is refused (fuzz finding 6).
TEST(ParseChat, MinTokensWithoutMaxTokensIsLeftToTheServer) {
  auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "min_tokens": 21})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_FALSE(r->max_tokens_set);
  EXPECT_EQ(r->params.min_tokens, 21);
  auto bad =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "min_tokens": 21, "max_tokens": 4})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("min_tokens"), std::string::npos) << bad.err().message;
}

TEST(ParseChat, LogprobsWithoutTopLogprobsMeansSampledTokenOnly) {
  auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.num_logprobs, 0);
}

struct bad_case {
  const char* body;
  const char* param;
};

class ParseChatErrors : public ::testing::TestWithParam<bad_case> {};

TEST_P(ParseChatErrors, NameTheField) {
  auto r = parse_chat_request(GetParam().body);
  ASSERT_FALSE(r.ok()) << GetParam().body;
  EXPECT_EQ(error_param(r.err().message), GetParam().param) << r.err().message;
}

#define MSG R"("messages": [{"role": "user", "content": "x"}])"
INSTANTIATE_TEST_SUITE_P(
    EveryField, ParseChatErrors,
    ::testing::Values(
        bad_case{R"({"model": "m"})", "messages"},
        bad_case{R"({"messages": "hi"})", "messages"},
        bad_case{R"({"messages": []})", "messages"},
        bad_case{R"({"messages": [3]})", "messages[0]"},
        bad_case{R"({"messages": [{"content": "x"}]})", "messages[0].role"},
        bad_case{R"({"messages": [{"role": "user"}, {"role": "wizard", "content": "x"}]})", "messages[1].role"},
        bad_case{R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
        bad_case{R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
        bad_case{R"({"messages": [{"role": "user", "content": [5]}]})", "messages[0].content[0]"},
        bad_case{R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
                 "messages[0].content[0].type"},
        bad_case{R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
        bad_case{R"({"messages": [{"role": "user", "content": "x", "name": 3}]})", "messages[0].name"},
        bad_case{R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]})", "messages[0].tool_call_id"},
        bad_case{"{" MSG R"(, "max_completion_tokens": 0})", "max_completion_tokens"},
        bad_case{"{" MSG R"(, "max_completion_tokens": "3"})", "max_completion_tokens"},
        bad_case{"{" MSG R"(, "max_tokens": -1})", "max_tokens"},
        bad_case{"{" MSG R"(, "logprobs": 2})", "logprobs"},
        bad_case{"{" MSG R"(, "top_logprobs": 21, "logprobs": true})", "top_logprobs"},
        bad_case{"{" MSG R"(, "top_logprobs": 2})", "top_logprobs"},
        bad_case{"{" MSG R"(, "add_generation_prompt": "no"})", "add_generation_prompt"},
        bad_case{"{" MSG R"(, "temperature": 101})", "temperature"},
        bad_case{"{" MSG R"(, "top_p": 1.5})", "top_p"},
        bad_case{"{" MSG R"(, "min_p": -0.1})", "min_p"},
        bad_case{"{" MSG R"(, "n": 129})", "n"},
        bad_case{"{" MSG R"(, "stop": [1]})", "stop"},
        bad_case{"{" MSG R"(, "seed": 1.5})", "seed"},
        bad_case{"{" MSG R"(, "stream": 0})", "stream"}));
#undef MSG

TEST(ParseChat, ImagePartsAreUnsupported) {
  auto r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, error_code::unsupported);
}

TEST(ParseTokenize, PromptOrMessages) {
  auto p = parse_tokenize_request(R"({"model": "m", "prompt": "hello", "add_special_tokens": false})");
  ASSERT_TRUE(p.ok()) << p.err().message;
  EXPECT_FALSE(p->is_chat);
  EXPECT_EQ(p->prompt.text, "hello");
  EXPECT_FALSE(p->add_special_tokens);
  auto m = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})");
  ASSERT_TRUE(m.ok()) << m.err().message;
  EXPECT_TRUE(m->is_chat);
  EXPECT_EQ(m->messages.size(), 1u);
  EXPECT_FALSE(m->add_generation_prompt);
  auto neither = parse_tokenize_request(R"({"model": "m"})");
  ASSERT_FALSE(neither.ok());
  EXPECT_EQ(error_param(neither.err().message), "prompt");
  auto both = parse_tokenize_request(R"({"prompt": "a", "messages": [{"role": "user", "content": "x"}]})");
  ASSERT_FALSE(both.ok());
  auto bad = parse_tokenize_request(R"({"prompt": 3})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(error_param(bad.err().message), "prompt");
}

TEST(ParseDetokenize, TokensRequiredAndTyped) {
  auto r = parse_detokenize_request(R"({"tokens": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{1, 2, 3}));
  auto missing = parse_detokenize_request(R"({})");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(error_param(missing.err().message), "tokens");
  auto wrong = parse_detokenize_request(R"({"tokens": ["a"]})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(error_param(wrong.err().message), "tokens");
}

}  // namespace
}  // namespace actorserve::protocol::openai
