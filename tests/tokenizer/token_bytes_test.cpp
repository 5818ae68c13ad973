// tokenizer::token_bytes: the raw bytes each token adds to a text (what grammar masks match),
// consistent with decoding: for every id, decoding a text after a neutral prefix adds exactly
// its bytes (when they are whole UTF-8).
#include "protocol/tokenizer/utf8.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

TEST(TokenBytes, ByteLevelMapsBackToBytes) {
  auto tok = load_fixture_tokenizer("bytelevel");
  const auto id = tok.token_to_id("\xC4\xA0");  // "Ġ", a space
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(tok.token_bytes(*id), std::optional<std::string>(" "));
  EXPECT_FALSE(tok.token_bytes(-1).has_value());
  EXPECT_FALSE(tok.token_bytes(tok.vocab_size()).has_value());
}

TEST(TokenBytes, SentencepieceKeepsTheSpaceAndByteTokens) {
  auto tok = load_fixture_tokenizer("sentencepiece");
  const auto space = tok.token_to_id("\xE2\x96\x81");  // "▁"
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(tok.token_bytes(*space), std::optional<std::string>(" "));  // not stripped mid-text
  const auto newline = tok.token_to_id("<0x0A>");
  ASSERT_TRUE(newline.has_value());
  EXPECT_EQ(tok.token_bytes(*newline), std::optional<std::string>("\n"));
}

class token_bytes_decode : public ::testing::TestWithParam<std::string> {};

TEST_P(token_bytes_decode, AgreeWithDecodingAfterAPrefix) {
  auto tok = load_fixture_tokenizer(GetParam());
  const auto prefix = tok.encode("x", false);
  ASSERT_FALSE(prefix.empty());
  const std::string base = tok.decode(prefix, false);
  int checked = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    auto bytes = tok.token_bytes(id);
    if (!bytes || tok.is_special(id) || !protocol::detail::is_valid_utf8(*bytes)) continue;
    std::vector<int32_t> ids = prefix;
    ids.push_back(id);
    EXPECT_EQ(tok.decode(ids, false), base + *bytes) << "id " << id;
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

INSTANTIATE_TEST_SUITE_P(fixtures, token_bytes_decode, ::testing::ValuesIn(fixture_names()));

}  // namespace
}  // namespace actorserve::testing
