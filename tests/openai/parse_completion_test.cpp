#include <gtest/gtest.h>

#include "protocol/openai/parse.hpp"

namespace actorserve::protocol::openai {
namespace {

TEST(ParseCompletion, ReadsEveryField) {
  auto r = parse_completion_request(R"({
    "model": "tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "seed": 1234, "stop": ["\n", "END"], "n": 3, "logprobs": 2,
    "echo": false, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
    "return_token_ids": true, "min_tokens": 2, "stop_token_ids": [5, 6], "user": "someone"})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->model, "tiny");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_FALSE(r->prompts[0].is_ids);
  EXPECT_EQ(r->prompts[0].text, "Hello");
  const auto& p = r->params;
  EXPECT_TRUE(r->max_tokens_set);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.seed, 1234u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(p.n, 3);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(p.num_logprobs, 2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(r->output.stream);
  EXPECT_TRUE(r->output.include_usage);
  EXPECT_TRUE(r->output.return_token_ids);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{5, 6}));
}

TEST(ParseCompletion, DefaultsAreOpenAIs) {
  auto r = parse_completion_request(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_FALSE(r->max_tokens_set);
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r->params.temperature, 1.0f);
  EXPECT_EQ(r->params.n, 1);
  EXPECT_EQ(r->params.num_logprobs, -1);
  EXPECT_FALSE(r->logprobs);
  EXPECT_FALSE(r->params.seed.has_value());
  EXPECT_FALSE(r->output.stream);
  EXPECT_FALSE(r->output.include_usage);
}

TEST(ParseCompletion, NullFieldsCountAsAbsent) {
  auto r = parse_completion_request(R"({"prompt": "x", "max_tokens": null, "stop": null, "seed": null})");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_TRUE(r->params.stop.empty());
}

TEST(ParseCompletion, PromptShapes) {
  auto one_string = parse_completion_request(R"({"prompt": "a", "stop": "S"})");
  ASSERT_TRUE(one_string.ok());
  EXPECT_EQ(one_string->params.stop, std::vector<std::string>{"S"});

  auto strings = parse_completion_request(R"({"prompt": ["a", "bc"]})");
  ASSERT_TRUE(strings.ok());
  ASSERT_EQ(strings->prompts.size(), 2u);
  EXPECT_EQ(strings->prompts[1].text, "bc");

  auto ids = parse_completion_request(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_TRUE(ids->prompts[0].is_ids);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));

  auto id_lists = parse_completion_request(R"({"prompt": [[1, 2], [7]]})");
  ASSERT_TRUE(id_lists.ok());
  ASSERT_EQ(id_lists->prompts.size(), 2u);
  EXPECT_TRUE(id_lists->prompts[1].is_ids);
  EXPECT_EQ(id_lists->prompts[1].ids, std::vector<int32_t>{7});
}

struct bad_case {
  const char* body;
  const char* param;
};

class ParseCompletionErrors : public ::testing::TestWithParam<bad_case> {};

TEST_P(ParseCompletionErrors, NameTheField) {
  auto r = parse_completion_request(GetParam().body);
  ASSERT_FALSE(r.ok()) << GetParam().body;
  EXPECT_EQ(error_param(r.err().message), GetParam().param) << r.err().message;
}

INSTANTIATE_TEST_SUITE_P(
    EveryField, ParseCompletionErrors,
    ::testing::Values(
        bad_case{R"({"prompt": "x", "model": 3})", "model"},
        bad_case{R"({"max_tokens": 3})", "prompt"},
        bad_case{R"({"prompt": 3})", "prompt"},
        bad_case{R"({"prompt": []})", "prompt"},
        bad_case{R"({"prompt": [[]]})", "prompt"},
        bad_case{R"({"prompt": [1, "a"]})", "prompt"},
        bad_case{R"({"prompt": [1, -2]})", "prompt"},
        bad_case{R"({"prompt": [{"a": 1}]})", "prompt"},
        bad_case{R"({"prompt": "x", "max_tokens": "7"})", "max_tokens"},
        bad_case{R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
        bad_case{R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
        bad_case{R"({"prompt": "x", "temperature": "hot"})", "temperature"},
        bad_case{R"({"prompt": "x", "temperature": -1})", "temperature"},
        bad_case{R"({"prompt": "x", "top_p": 0})", "top_p"},
        bad_case{R"({"prompt": "x", "top_p": true})", "top_p"},
        bad_case{R"({"prompt": "x", "top_k": -2})", "top_k"},
        bad_case{R"({"prompt": "x", "top_k": 0.5})", "top_k"},
        bad_case{R"({"prompt": "x", "min_p": 1.5})", "min_p"},
        bad_case{R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
        bad_case{R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"},
        bad_case{R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
        bad_case{R"({"prompt": "x", "seed": "1"})", "seed"},
        bad_case{R"({"prompt": "x", "stop": 5})", "stop"},
        bad_case{R"({"prompt": "x", "stop": ["a", 5]})", "stop"},
        bad_case{R"({"prompt": "x", "stop": [""]})", "stop"},
        bad_case{R"({"prompt": "x", "n": 0})", "n"},
        bad_case{R"({"prompt": "x", "n": "2"})", "n"},
        bad_case{R"({"prompt": "x", "logprobs": 21})", "logprobs"},
        bad_case{R"({"prompt": "x", "logprobs": true})", "logprobs"},
        bad_case{R"({"prompt": "x", "echo": true})", "echo"},
        bad_case{R"({"prompt": "x", "echo": "no"})", "echo"},
        bad_case{R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
        bad_case{R"({"prompt": "x", "stream": "yes"})", "stream"},
        bad_case{R"({"prompt": "x", "stream_options": 1})", "stream_options"},
        bad_case{R"({"prompt": "x", "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
        bad_case{R"({"prompt": "x", "return_token_ids": "y"})", "return_token_ids"},
        bad_case{R"({"prompt": "x", "min_tokens": 20})", "min_tokens"},
        bad_case{R"({"prompt": "x", "stop_token_ids": [1, "a"]})", "stop_token_ids"},
        bad_case{R"({"prompt": "x", "stop_token_ids": 3})", "stop_token_ids"},
        bad_case{R"([1, 2])", "body"},
        bad_case{R"({"prompt": "x",)", "body"}));

TEST(ParseCompletion, EchoIsUnsupportedNotInvalid) {
  auto r = parse_completion_request(R"({"prompt": "x", "echo": true})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, error_code::unsupported);
}

TEST(ParseCompletion, InvalidUtf8BodyIsRejected) {
  auto r = parse_completion_request("{\"prompt\": \"\xFF\"}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, error_code::invalid_argument);
  EXPECT_EQ(error_param(r.err().message), "body");
}

TEST(ErrorParam, OnlyIdentifierPrefixes) {
  EXPECT_EQ(error_param("messages[2].content[0].type: bad"), "messages[2].content[0].type");
  EXPECT_EQ(error_param("This model's maximum context length is 5: bad"), "");
  EXPECT_EQ(error_param("no colon here"), "");
}

}  // namespace
}  // namespace actorserve::protocol::openai

namespace actorserve::protocol::openai {
namespace {
// Found by fuzzing: numbers beyond int64 must be a range error, never an undefined cast.
TEST(ParseCompletion, HugeOrFractionalIntegersNameTheField) {
  for (const char* v : {"1e19", "-1e300", "1e308", "2.5"}) {
    auto r = parse_completion_request(std::string(R"({"prompt": "a", "max_tokens": )") + v + "}");
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.err().message.rfind("max_tokens", 0), 0u) << r.err().message;
  }
}
}  // namespace
}  // namespace actorserve::protocol::openai
