#include <gtest/gtest.h>

#include "protocol/openai/write.hpp"

namespace actorserve::protocol::openai {
namespace {

const response_meta kMeta{"cmpl-1", 1700000000, "tiny"};

TEST(WriteChunks, ChatChunkFirstCarriesRoleThenContent) {
  chunk_delta first;
  first.first = true;
  EXPECT_EQ(write_chat_chunk(kMeta, first, {}),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  chunk_delta next;
  next.index = 1;
  next.text = "Hi\n";
  next.finish_reason = "length";
  EXPECT_EQ(write_chat_chunk(kMeta, next, {.include_usage = true}),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":1,"delta":{"content":"Hi\n"},"logprobs":null,"finish_reason":"length"}],"usage":null})");
}

TEST(WriteChunks, CompletionChunkWithTokenIds) {
  chunk_delta d;
  d.text = "ab";
  const int32_t ids[] = {4, 5};
  const int32_t prompt[] = {1, 2};
  d.token_ids = ids;
  d.prompt_token_ids = prompt;
  EXPECT_EQ(write_completion_chunk(kMeta, d, {.return_token_ids = true}),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":null,"token_ids":[4,5],"prompt_token_ids":[1,2]}]})");
}

TEST(WriteChunks, UsageChunkHasNoChoices) {
  EXPECT_EQ(write_usage_chunk(kMeta, true, {5, 3, 2}),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tiny","choices":[],)"
            R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}})");
}

std::vector<token_logprob> two_tokens() {
  return {{"He", -0.5f, {{"He", -0.5f}, {"Ha", -1.5f}}}, {"llo", -0.25f, {{"y", -0.75f}, {"llo", -0.25f}}}};
}

TEST(WriteLogprobs, CompletionShape) {
  std::string out;
  json::writer w(out);
  write_completion_logprobs(w, two_tokens(), 10);
  EXPECT_EQ(out, R"({"tokens":["He","llo"],"token_logprobs":[-0.5,-0.25],)"
                 R"("top_logprobs":[{"He":-0.5,"Ha":-1.5},{"llo":-0.25,"y":-0.75}],"text_offset":[10,12]})");
}

TEST(WriteLogprobs, ChatShapeWithBytes) {
  std::string out;
  json::writer w(out);
  std::vector<token_logprob> lp{{"\xC3\xA9", -1.0f, {{"a", -2.0f}}}};
  write_chat_logprobs(w, lp);
  EXPECT_EQ(out, "{\"content\":[{\"token\":\"\xC3\xA9\",\"logprob\":-1,\"bytes\":[195,169],"
                 "\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-2,\"bytes\":[97]}]}]}");
}

TEST(WriteLogprobs, PartialUtf8TokenStaysValidJsonButBytesAreExact) {
  std::string out;
  json::writer w(out);
  std::vector<token_logprob> lp{{"\xE4\xB8", -1.0f, {}}};
  write_chat_logprobs(w, lp);
  EXPECT_EQ(out, "{\"content\":[{\"token\":\"\xEF\xBF\xBD\xEF\xBF\xBD\",\"logprob\":-1,\"bytes\":[228,184],"
                 "\"top_logprobs\":[]}]}");
}

TEST(WriteResponses, CompletionWithTwoPromptsAndN2) {
  std::vector<choice_result> choices(4);
  for (int i = 0; i < 4; ++i) {
    choices[i].index = i;
    choices[i].text = std::string(1, static_cast<char>('a' + i));
    choices[i].token_ids = {100 + i};
    choices[i].finish_reason = i == 3 ? "length" : "stop";
  }
  std::vector<std::vector<int32_t>> prompts{{1}, {2, 3}};
  const std::string out = write_completion(kMeta, choices, {3, 4, 0}, prompts, 2, {.return_token_ids = true});
  EXPECT_EQ(out,
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[)"
            R"({"index":0,"text":"a","logprobs":null,"finish_reason":"stop","token_ids":[100],"prompt_token_ids":[1]},)"
            R"({"index":1,"text":"b","logprobs":null,"finish_reason":"stop","token_ids":[101],"prompt_token_ids":[1]},)"
            R"({"index":2,"text":"c","logprobs":null,"finish_reason":"stop","token_ids":[102],"prompt_token_ids":[2,3]},)"
            R"({"index":3,"text":"d","logprobs":null,"finish_reason":"length","token_ids":[103],"prompt_token_ids":[2,3]}],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(WriteResponses, ChatCompletion) {
  std::vector<choice_result> choices(1);
  choices[0].text = "Hello \"you\"";
  choices[0].logprobs = {{"Hello", -0.5f, {}}};
  const int32_t prompt[] = {9};
  EXPECT_EQ(write_chat_completion(kMeta, choices, {1, 1, 0}, prompt, {.logprobs = true}),
            R"({"id":"cmpl-1","object":"chat.completion","created":1700000000,"model":"tiny","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":"Hello \"you\""},)"
            R"("logprobs":{"content":[{"token":"Hello","logprob":-0.5,"bytes":[72,101,108,108,111],"top_logprobs":[]}]},)"
            R"("finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(WriteResponses, ErrorObject) {
  EXPECT_EQ(write_error("top_p: must be in (0, 1], got 2", "invalid_request_error", "top_p", "invalid_argument"),
            R"({"error":{"message":"top_p: must be in (0, 1], got 2","type":"invalid_request_error",)"
            R"("param":"top_p","code":"invalid_argument"}})");
  EXPECT_EQ(write_error("boom", "server_error", "", ""),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
}

TEST(WriteResponses, TokenizeDetokenizeModels) {
  const int32_t ids[] = {1, 15043};
  EXPECT_EQ(write_tokenize(ids, 2048), R"({"count":2,"max_model_len":2048,"tokens":[1,15043]})");
  EXPECT_EQ(write_detokenize("a\tb"), R"({"prompt":"a\tb"})");
  EXPECT_EQ(write_models("tiny", 5, 64),
            R"({"object":"list","data":[{"id":"tiny","object":"model","created":5,"owned_by":"actorserve",)"
            R"("root":"tiny","max_model_len":64}]})");
}

}  // namespace
}  // namespace actorserve::protocol::openai
