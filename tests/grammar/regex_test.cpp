// The regex subset (guided_regex, JSON Schema pattern) and UTF-8 classes.
#include <gtest/gtest.h>

#include "grammar/regex.hpp"
#include "grammar/utf8_class.hpp"
#include "grammar_test_util.hpp"

namespace actorserve::grammar {
namespace {

std::shared_ptr<const compiled_grammar> compile_regex(std::string_view pattern,
                                                      regex_target target = regex_target::raw) {
  auto e = regex_expr(pattern, target, regex_match::whole, "guided_regex");
  EXPECT_TRUE(e.ok()) << pattern << ": " << (e.ok() ? "" : e.err().message);
  if (!e.ok()) return nullptr;
  grammar_builder b;
  const rule_id root = b.add("root", *e);
  auto g = b.build(root);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.err().message);
  return compiled_grammar::compile(std::move(*g), testing::make_vocab({"a"}));
}

bool full(const std::shared_ptr<const compiled_grammar>& g, std::string_view text) {
  matcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

std::string refusal(std::string_view pattern) {
  auto e = regex_expr(pattern, regex_target::raw, regex_match::whole, "guided_regex");
  return e.ok() ? std::string("(compiled)") : e.err().message;
}

TEST(Regex, LiteralsClassesAndEscapes) {
  auto g = compile_regex(R"(a\.b[0-9x-z]\d\w\s\x41\u00e9[^a-c])");
  EXPECT_TRUE(full(g, "a.b5" "7_ A\xC3\xA9" "d"));
  EXPECT_TRUE(full(g, "a.by" "0Z\tA\xC3\xA9" "\xE6\x97\xA5"));
  EXPECT_FALSE(full(g, "a.b5" "7_ A\xC3\xA9" "b"));
  EXPECT_FALSE(full(g, "axb5" "7_ A\xC3\xA9" "d"));
  auto dot = compile_regex("a.c");
  EXPECT_TRUE(full(dot, "abc"));
  EXPECT_TRUE(full(dot, "a\xE2\x82\xAC" "c"));  // one character, three bytes
  EXPECT_FALSE(full(dot, "a\nc"));
  EXPECT_FALSE(full(dot, "a\xE2\x82" "c"));
}

TEST(Regex, QuantifiersGroupsAlternation) {
  auto g = compile_regex("(ab|c)+x{2,3}y?(?:z|w)*");
  EXPECT_TRUE(full(g, "abxx"));
  EXPECT_TRUE(full(g, "cabcxxxyzwz"));
  EXPECT_FALSE(full(g, "xx"));
  EXPECT_FALSE(full(g, "abxxxx"));
  auto lazy = compile_regex("a+?b*?");
  EXPECT_TRUE(full(lazy, "aab"));
  auto named = compile_regex("(?<year>\\d{4})-(?P<m>\\d\\d)");
  EXPECT_TRUE(full(named, "2024-05"));
  auto anchors = compile_regex("^abc$|^d$");
  EXPECT_TRUE(full(anchors, "abc"));
  EXPECT_TRUE(full(anchors, "d"));
  auto brace = compile_regex("a{b");  // not a quantifier: a literal brace
  EXPECT_TRUE(full(brace, "a{b"));
}

TEST(Regex, NullableRepetitionsStayFinite) {
  auto g = compile_regex("(a?b?)*c(x*)+");
  EXPECT_TRUE(full(g, "c"));
  EXPECT_TRUE(full(g, "abbac"));
  EXPECT_TRUE(full(g, "cxxx"));
  EXPECT_FALSE(full(g, "abd"));
  auto empty_alt = compile_regex("(|a)*b");
  EXPECT_TRUE(full(empty_alt, "aab"));
}

TEST(Regex, JsonStringTargetEscapes) {
  auto g = compile_regex("a\"\\\\\n.", regex_target::json_string);
  EXPECT_TRUE(full(g, R"(a\"\\\nz)"));
  EXPECT_TRUE(full(g, R"(a\"\\\u000Az)"));
  EXPECT_FALSE(full(g, "a\"\\\\\nz"));
  auto tab = compile_regex("[\\t ]", regex_target::json_string);
  EXPECT_TRUE(full(tab, R"(\t)"));
  EXPECT_TRUE(full(tab, " "));
  EXPECT_FALSE(full(tab, "\t"));
}

TEST(Regex, RefusalsNameTheConstruct) {
  EXPECT_NE(refusal("(a)\\1").find("backreference \\1"), std::string::npos);
  EXPECT_NE(refusal("\\k<x>").find("backreference"), std::string::npos);
  EXPECT_NE(refusal("a(?=b)").find("lookahead"), std::string::npos);
  EXPECT_NE(refusal("(?<=a)b").find("lookbehind"), std::string::npos);
  EXPECT_NE(refusal("(?i)abc").find("inline flags"), std::string::npos);
  EXPECT_NE(refusal("(?>a)").find("atomic"), std::string::npos);
  EXPECT_NE(refusal("\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(refusal("\\p{L}").find("Unicode property"), std::string::npos);
  EXPECT_NE(refusal("a++").find("possessive"), std::string::npos);
  EXPECT_NE(refusal("a^b").find("anchor"), std::string::npos);
  EXPECT_NE(refusal("a{1,20000}").find("bound above"), std::string::npos);
  EXPECT_NE(refusal("(ab").find("invalid pattern"), std::string::npos);
  EXPECT_NE(refusal("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_EQ(refusal("a").rfind("(compiled)", 0), 0u);
  EXPECT_EQ(refusal("\\q").rfind("guided_regex: ", 0), 0u);
}

TEST(Utf8Class, RangesEncodeExactly) {
  // Every code point of a few awkward ranges: inside encodes, the neighbours do not.
  const code_ranges ranges = {{0x7E, 0x81}, {0x7FF, 0x801}, {0xD7FF, 0xE001}, {0xFFFF, 0x10001}, {0x10FFFE, 0x10FFFF}};
  grammar_builder b;
  const rule_id root = b.add("root", utf8_class(ranges));
  auto g = b.build(root);
  ASSERT_TRUE(g.ok());
  auto c = compiled_grammar::compile(std::move(*g), testing::make_vocab({"a"}));
  auto in = [&](uint32_t cp) {
    for (auto [lo, hi] : normalize(ranges))
      if (cp >= lo && cp <= hi) return true;
    return false;
  };
  for (uint32_t cp : {0x7Du, 0x7Eu, 0x81u, 0x82u, 0x7FEu, 0x7FFu, 0x800u, 0x801u, 0x802u, 0xD7FFu, 0xE000u, 0xE001u,
                      0xE002u, 0xFFFEu, 0xFFFFu, 0x10000u, 0x10001u, 0x10002u, 0x10FFFDu, 0x10FFFFu}) {
    matcher m(c);
    const bool ok = m.accept_bytes(utf8_encode(cp)) && m.is_complete();
    EXPECT_EQ(ok, in(cp)) << std::hex << cp;
  }
  EXPECT_EQ(complement(code_ranges{{0, 0x10FFFF}}).size(), 0u);
  EXPECT_EQ(complement(code_ranges{}).size(), 2u);  // without the surrogates
}

}  // namespace
}  // namespace actorserve::grammar
