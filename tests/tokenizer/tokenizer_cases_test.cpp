// Every case of tests/data/tokenizers/*/cases.json (computed by Hugging Face tokenizers) is
// reproduced exactly: ids, decoded and decoded_skip_special; the model directories' tokenizers
// load and round-trip the same texts.
#include <filesystem>

#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

class tokenizer_cases : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_cases, encode_matches_reference_ids) {
  auto tok = load_fixture_tokenizer(GetParam());
  auto cases = load_cases(GetParam());
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text, true), c.ids) << "text: " << c.text;
}

TEST_P(tokenizer_cases, decode_matches_reference_text) {
  auto tok = load_fixture_tokenizer(GetParam());
  for (const auto& c : load_cases(GetParam())) {
    EXPECT_EQ(tok.decode(c.ids, false), c.decoded) << "text: " << c.text;
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded_skip_special) << "text: " << c.text;
  }
}

TEST_P(tokenizer_cases, encode_without_special_tokens_drops_only_the_bos) {
  auto tok = load_fixture_tokenizer(GetParam());
  for (const auto& c : load_cases(GetParam())) {
    std::vector<int32_t> expected(c.ids.begin() + 1, c.ids.end());
    EXPECT_EQ(tok.encode(c.text, false), expected) << "text: " << c.text;
  }
}

INSTANTIATE_TEST_SUITE_P(fixtures, tokenizer_cases, ::testing::ValuesIn(fixture_names()));

TEST(tokenizer_vocab, bytelevel_special_tokens_and_lookups) {
  auto tok = load_fixture_tokenizer("bytelevel");
  EXPECT_EQ(tok.vocab_size(), 1024);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 4);
  EXPECT_EQ(tok.id_to_token(4), "<|eot_id|>");
  EXPECT_EQ(tok.id_to_token(225), "\xC4\xA0");  // "Ġ", the byte-level space
  EXPECT_EQ(tok.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(-1), std::nullopt);
  EXPECT_EQ(tok.id_to_token(1024), std::nullopt);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(4));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_FALSE(tok.is_special(100000));
  EXPECT_EQ(tok.bos_token_id(), 0);
  EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
}

TEST(tokenizer_vocab, sentencepiece_bos_and_byte_tokens) {
  auto tok = load_fixture_tokenizer("sentencepiece");
  EXPECT_EQ(tok.bos_token_id(), 1);
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.token_to_id("<0x0D>"), 16);
  EXPECT_TRUE(tok.is_special(2));
}

/// The fixture whose tokenizer.json has the same bytes, if any.
std::string same_fixture(const std::string& tokenizer_json) {
  std::string content = read_file(tokenizer_json);
  for (const auto& name : fixture_names())
    if (read_file(tokenizer_dir(name) + "/tokenizer.json") == content) return name;
  return "";
}

TEST(tokenizer_models, every_model_dir_loads_and_round_trips) {
  int num_models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test_data_dir() + "/models")) {
    std::string dir = entry.path().string();
    if (!std::filesystem::exists(dir + "/tokenizer.json")) continue;
    ++num_models;
    auto tok = protocol::tokenizer::from_model_dir(dir);
    ASSERT_TRUE(tok) << tok.err().message;
    EXPECT_FALSE(tok->eos_token_ids().empty()) << dir << ": generation_config.json names an EOS id";
    std::string twin = same_fixture(dir + "/tokenizer.json");
    for (const auto& name : fixture_names()) {
      for (const auto& c : load_cases(name)) {
        auto ids = tok->encode(c.text, false);
        EXPECT_EQ(tok->decode(ids, false), c.text) << dir << " text: " << c.text;
        if (twin == name) {
          EXPECT_EQ(tok->encode(c.text, true), c.ids) << dir << " text: " << c.text;
        }
      }
    }
  }
  EXPECT_GE(num_models, 4);
}

}  // namespace
}  // namespace actorserve::testing
