// The streaming detokenizer: concatenated outputs equal the full decode, for every fixture case
// and for random id sequences, and no output ever ends inside a UTF-8 character.
#include <random>

#include "protocol/tokenizer/incremental_detokenizer.hpp"
#include "protocol/tokenizer/utf8.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

using protocol::incremental_detokenizer;

using protocol::detail::is_valid_utf8;

/// Streams `ids` one by one; checks each output is whole UTF-8 characters; returns the text.
std::string stream(const protocol::tokenizer& tok, std::span<const int32_t> prompt, std::span<const int32_t> ids,
                   bool skip_special, int* num_nonempty = nullptr) {
  incremental_detokenizer detok(tok, prompt, skip_special);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "broken UTF-8 after id " << id;
    if (num_nonempty && !piece.empty()) ++*num_nonempty;
    all += piece;
  }
  std::string rest = detok.flush();
  EXPECT_TRUE(is_valid_utf8(rest));
  return all + rest;
}

class detokenizer_cases : public ::testing::TestWithParam<std::string> {};

TEST_P(detokenizer_cases, streamed_text_equals_full_decode_for_every_case) {
  auto tok = load_fixture_tokenizer(GetParam());
  for (const auto& c : load_cases(GetParam())) {
    for (bool skip : {true, false}) {
      EXPECT_EQ(stream(tok, {}, c.ids, skip), skip ? c.decoded_skip_special : c.decoded) << "text: " << c.text;
      std::vector<int32_t> generated(c.ids.begin() + 1, c.ids.end());
      EXPECT_EQ(stream(tok, {}, generated, skip), tok.decode(generated, skip)) << "text: " << c.text;
    }
  }
}

TEST_P(detokenizer_cases, with_a_prompt_the_output_continues_the_prompt_text) {
  auto tok = load_fixture_tokenizer(GetParam());
  for (const auto& c : load_cases(GetParam())) {
    for (size_t split = 1; split < c.ids.size(); split += 3) {
      std::span<const int32_t> all(c.ids);
      std::string prompt_text = tok.decode(all.first(split), true);
      std::string full = tok.decode(all, true);
      if (full.compare(0, prompt_text.size(), prompt_text) != 0) continue;  // split inside a character
      EXPECT_EQ(stream(tok, all.first(split), all.subspan(split), true), full.substr(prompt_text.size()))
          << "text: " << c.text << " split " << split;
    }
  }
}

TEST_P(detokenizer_cases, random_id_sequences_stream_to_the_full_decode) {
  auto tok = load_fixture_tokenizer(GetParam());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_id(-3, tok.vocab_size() + 3);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (auto& id : ids) id = any_id(rng);
    bool skip = round % 2 == 0;
    EXPECT_EQ(stream(tok, {}, ids, skip), tok.decode(ids, skip)) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(fixtures, detokenizer_cases, ::testing::ValuesIn(fixture_names()));

TEST(detokenizer, cjk_split_across_byte_level_tokens_is_emitted_whole) {
  auto tok = load_fixture_tokenizer("bytelevel");
  std::string text = "日本語のテキスト 🙂🚀";
  auto ids = tok.encode(text, false);
  ASSERT_GT(ids.size(), 8u);  // the tiny vocabulary splits the characters into byte tokens
  int num_nonempty = 0;
  EXPECT_EQ(stream(tok, {}, ids, true, &num_nonempty), text);
  EXPECT_GE(num_nonempty, 8);  // characters are emitted as soon as they complete
}

TEST(detokenizer, byte_fallback_characters_are_emitted_whole) {
  auto tok = load_fixture_tokenizer("sentencepiece");
  std::string text = "Ω≈ç√∫ 中文字符 🎉";  // mostly outside the tiny vocabulary: <0xNN> byte tokens
  auto ids = tok.encode(text, false);
  int num_bytes = 0;
  for (int32_t id : ids) num_bytes += tok.id_to_token(id)->rfind("<0x", 0) == 0;
  ASSERT_GT(num_bytes, 6);
  EXPECT_EQ(stream(tok, {}, ids, true), text);
}

TEST(detokenizer, sentencepiece_leading_space_is_kept_after_a_prompt) {
  auto tok = load_fixture_tokenizer("sentencepiece");
  auto prompt = tok.encode("Hello", true);
  auto gen = tok.encode("world", false);  // the normalizer's "▁" prefix is the output's space
  std::string out = stream(tok, prompt, gen, true);
  EXPECT_EQ(out, " world");
}

TEST(detokenizer, skipped_special_tokens_produce_no_text) {
  auto tok = load_fixture_tokenizer("bytelevel");
  incremental_detokenizer detok(tok, {}, true);
  EXPECT_EQ(detok.push(4), "");  // <|eot_id|>
  EXPECT_EQ(detok.push(*tok.token_to_id("H")), "H");
  EXPECT_EQ(detok.push(100000), "");  // out of range
  EXPECT_EQ(detok.flush(), "");
}

}  // namespace
}  // namespace actorserve::testing
