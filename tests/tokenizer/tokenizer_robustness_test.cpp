// Arbitrary input never crashes: random bytes encode to in-range ids (losslessly for the
// byte-level vocabulary), arbitrary ids decode to valid UTF-8, invalid byte runs decode to
// U+FFFD as Hugging Face does.
#include <random>
#include <thread>

#include "protocol/tokenizer/utf8.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

const std::string fffd = "\xEF\xBF\xBD";

using protocol::detail::is_valid_utf8;

std::string random_bytes(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> pieces = {"a", " ", "\n", "\xE6\x97\xA5", "\xF0\x9F\x99\x82", "<|eot_id|>",
                                                  "<s>", "\xE2\x96\x81", "'s", "12", "\r\n", "  "};
  std::string s;
  while (s.size() < n) {
    if (rng() % 3 == 0)
      s += pieces[rng() % pieces.size()];
    else
      s.push_back(static_cast<char>(rng() % 256));
  }
  return s;
}

class tokenizer_fuzz : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_fuzz, random_bytes_encode_to_valid_ids_and_decode_to_valid_utf8) {
  auto tok = load_fixture_tokenizer(GetParam());
  std::mt19937 rng(42);
  for (int round = 0; round < 500; ++round) {
    std::string text = random_bytes(rng, rng() % 200);
    auto ids = tok.encode(text, round % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    std::string back = tok.decode(ids, false);
    EXPECT_TRUE(is_valid_utf8(back));
    if (GetParam() == "bytelevel" && round % 2 == 1 && is_valid_utf8(text)) {
      EXPECT_EQ(back, text);  // byte-level BPE is lossless
    }
  }
}

TEST_P(tokenizer_fuzz, valid_utf8_round_trips_exactly) {
  auto tok = load_fixture_tokenizer(GetParam());
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> cp_dist(1, 0x10FFFF);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (int i = 0, n = static_cast<int>(rng() % 60); i < n; ++i) {
      uint32_t cp = rng() % 2 ? 32 + rng() % 95 : cp_dist(rng);
      if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
      // Encode the code point by hand (no locale dependence).
      if (cp < 0x80) text.push_back(static_cast<char>(cp));
      else if (cp < 0x800) text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      else if (cp < 0x10000)
        text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                 static_cast<char>(0x80 | (cp & 0x3F))};
      else
        text += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                 static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    EXPECT_EQ(tok.decode(tok.encode(text, false), false), text) << "round " << round;
  }
}

TEST_P(tokenizer_fuzz, arbitrary_ids_decode_without_crashing) {
  auto tok = load_fixture_tokenizer(GetParam());
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    std::vector<int32_t> ids(rng() % 64);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 3 == 0 ? rng() : rng() % (tok.vocab_size() + 10));
    EXPECT_TRUE(is_valid_utf8(tok.decode(ids, round % 2 == 0)));
  }
  std::vector<int32_t> extremes = {INT32_MIN, -1, tok.vocab_size(), INT32_MAX};
  EXPECT_EQ(tok.decode(extremes, false), "");
}

INSTANTIATE_TEST_SUITE_P(fixtures, tokenizer_fuzz, ::testing::ValuesIn(fixture_names()));

TEST(tokenizer_invalid_utf8, byte_level_keeps_every_byte_and_decodes_lossily) {
  auto tok = load_fixture_tokenizer("bytelevel");
  std::string text = "ab\xFF" "c\xE6\x97" "d";  // a stray 0xFF and a truncated 3-byte character
  auto ids = tok.encode(text, false);
  EXPECT_EQ(tok.decode(ids, false), "ab" + fffd + "c" + fffd + "d");
}

TEST(tokenizer_invalid_utf8, byte_fallback_run_that_is_not_utf8_becomes_one_fffd_per_byte) {
  auto tok = load_fixture_tokenizer("sentencepiece");
  // <0x41> <0xE6> <0x97>: a run of byte tokens that is not valid UTF-8 as a whole (HF semantics).
  std::vector<int32_t> ids = {*tok.token_to_id("<0x41>"), *tok.token_to_id("<0xE6>"), *tok.token_to_id("<0x97>"),
                              *tok.token_to_id("a")};
  EXPECT_EQ(tok.decode(ids, false), fffd + fffd + fffd + "a");
  // Invalid input bytes are encoded as byte tokens.
  auto enc = tok.encode("x\xFFy", false);
  EXPECT_NE(std::find(enc.begin(), enc.end(), *tok.token_to_id("<0xFF>")), enc.end());
}

TEST(tokenizer_long_input, long_runs_and_large_texts_encode) {
  for (const auto& name : fixture_names()) {
    auto tok = load_fixture_tokenizer(name);
    std::string spaces(200000, ' ');
    std::string text = "start" + spaces + "end " + std::string(100000, 'a');
    auto ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids, false), text) << name;
  }
}

TEST(tokenizer_threads, concurrent_encodes_agree_with_a_single_thread) {
  for (const auto& name : fixture_names()) {
    auto tok = load_fixture_tokenizer(name);
    std::vector<std::string> texts;
    for (const auto& c : load_cases(name)) texts.push_back(c.text + " " + c.text);
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok.encode(t, true));
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] {
        for (int round = 0; round < 200; ++round)
          for (size_t i = 0; i < texts.size(); ++i) mismatches[k] += tok.encode(texts[i], true) != expected[i];
      });
    }
    for (auto& th : threads) th.join();
    for (int k = 0; k < 4; ++k) EXPECT_EQ(mismatches[k], 0) << name << " thread " << k;
  }
}

}  // namespace
}  // namespace actorserve::testing
