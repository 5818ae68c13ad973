// The tokenizer.json Unicode normalizers (NFC, NFD, NFKC, NFKD; protocol/tokenizer/
// unicode_normalize.*): the forms themselves against examples from the Unicode standard
// (UAX #15), then a real fixture tokenizer with an NFC normalizer, as Qwen2's tokenizer.json has.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "protocol/tokenizer/unicode_normalize.hpp"
#include "scratch_dir.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

using protocol::detail::unicode_form;
using protocol::detail::unicode_normalize;

TEST(UnicodeNormalize, FormsFollowTheStandard) {
  // e + combining acute <-> precomposed e-acute.
  EXPECT_EQ(unicode_normalize("Cafe\u0301", unicode_form::nfc), "Caf\u00e9");
  EXPECT_EQ(unicode_normalize("Caf\u00e9", unicode_form::nfd), "Cafe\u0301");
  // Canonical ordering: dot below (ccc 220) before dot above (ccc 230), whatever the input order.
  EXPECT_EQ(unicode_normalize("q\u0307\u0323", unicode_form::nfd), "q\u0323\u0307");
  EXPECT_EQ(unicode_normalize("q\u0307\u0323", unicode_form::nfc), "q\u0323\u0307");
  // The fi ligature and the vulgar fraction one half are compatibility, not canonical, forms.
  EXPECT_EQ(unicode_normalize("\ufb01ne", unicode_form::nfc), "\ufb01ne");
  EXPECT_EQ(unicode_normalize("\ufb01ne", unicode_form::nfkc), "fine");
  EXPECT_EQ(unicode_normalize("\u00bd", unicode_form::nfkd), "1\u20442");
  // Hangul: leading consonant + vowel compose to one syllable, and decompose back.
  EXPECT_EQ(unicode_normalize("\u1100\u1161", unicode_form::nfc), "\uac00");
  EXPECT_EQ(unicode_normalize("\uac00", unicode_form::nfd), "\u1100\u1161");
  // The Angstrom sign is canonically the A with ring above.
  EXPECT_EQ(unicode_normalize("\u212b", unicode_form::nfc), "\u00c5");
}

TEST(UnicodeNormalize, KeepsNulBytesAndLeavesInvalidUtf8Alone) {
  const std::string with_nul("a\0e\u0301", 5);
  EXPECT_EQ(unicode_normalize(with_nul, unicode_form::nfc), std::string("a\0\u00e9", 4));
  const std::string bad = "ok \xff\xfe e\u0301";
  EXPECT_EQ(unicode_normalize(bad, unicode_form::nfc), bad);
  EXPECT_EQ(unicode_normalize("", unicode_form::nfkc), "");
}

TEST(UnicodeNormalize, NamesTheFourForms) {
  EXPECT_EQ(protocol::detail::unicode_form_named("NFC"), unicode_form::nfc);
  EXPECT_EQ(protocol::detail::unicode_form_named("NFD"), unicode_form::nfd);
  EXPECT_EQ(protocol::detail::unicode_form_named("NFKC"), unicode_form::nfkc);
  EXPECT_EQ(protocol::detail::unicode_form_named("NFKD"), unicode_form::nfkd);
  EXPECT_FALSE(protocol::detail::unicode_form_named("Lowercase").has_value());
}

/// The bytelevel fixture's tokenizer.json with its null normalizer replaced by `normalizer`.
protocol::tokenizer with_normalizer(const std::string& normalizer) {
  std::string json = read_file(tokenizer_dir("bytelevel") + "/tokenizer.json");
  const std::string null_normalizer = "\"normalizer\": null";
  const size_t at = json.find(null_normalizer);
  EXPECT_NE(at, std::string::npos);
  json.replace(at, null_normalizer.size(), "\"normalizer\": " + normalizer);
  const scratch_dir dir("normalizer");
  const auto path = dir / "tokenizer.json";
  std::ofstream(path) << json;
  auto tok = protocol::tokenizer::from_files(path.string(), "");
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.err().message);
  return std::move(*tok);
}

TEST(UnicodeNormalize, AnNfcTokenizerEncodesBothSpellingsAlike) {
  const std::string composed = "Caf\u00e9 \uac00 \u00c5", decomposed = "Cafe\u0301 \u1100\u1161 A\u030a";
  auto plain = protocol::tokenizer::from_files(tokenizer_dir("bytelevel") + "/tokenizer.json", "");
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_NE(plain->encode(composed, false), plain->encode(decomposed, false));  // no normalizer: bytes differ
  const auto nfc = with_normalizer(R"({"type": "NFC"})");
  EXPECT_EQ(nfc.encode(decomposed, false), nfc.encode(composed, false));
  EXPECT_EQ(nfc.encode(composed, false), plain->encode(composed, false));  // NFC text is left as it is
  EXPECT_EQ(nfc.decode(nfc.encode(decomposed, false), false), composed);
  // Inside a Sequence, and the compatibility form.
  const auto nfkc = with_normalizer(R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}]})");
  EXPECT_EQ(nfkc.encode("\ufb01ne", false), plain->encode("fine", false));
  const auto nfd = with_normalizer(R"({"type": "NFD"})");
  EXPECT_EQ(nfd.encode(composed, false), plain->encode(decomposed, false));  // NFD of `composed` is `decomposed`
}

}  // namespace
}  // namespace actorserve::testing
