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

// (x*)*, t**, (x?)+ ... are one repetition of the same language: each string keeps one reading,
// so the matcher holds one stack however deep the nesting (70 nested stars used to make 2^69).
TEST(Regex, NestedRepetitionsCollapseToOne) {
  const struct {
    const char* pattern;
    std::vector<std::string> in, out;
  } cases[] = {
      {"t**", {"", "t", "ttt"}, {"u", "tu"}},
      {"((t*)*)*", {"", "tt"}, {"x"}},
      {"(t+)+", {"t", "tttt"}, {""}},
      {"(t+)?", {"", "tt"}, {"u"}},
      {"(t?)+", {"", "ttt"}, {"u"}},
      {"(t?)?", {"", "t"}, {"tt"}},
      {"(t*)?u", {"u", "ttu"}, {"t"}},
      {"(t{2})*", {"", "tt", "tttt"}, {"t", "ttt"}},  // {n} is not collapsed: its language differs
  };
  for (const auto& c : cases) {
    auto g = compile_regex(c.pattern);
    for (const auto& text : c.in) EXPECT_TRUE(full(g, text)) << c.pattern << " on '" << text << "'";
    for (const auto& text : c.out) EXPECT_FALSE(full(g, text)) << c.pattern << " on '" << text << "'";
  }
  std::string deep = "t";
  for (int i = 0; i < 70; ++i) deep += "*";
  matcher m(compile_regex(deep));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(m.accept_bytes("t"));
  EXPECT_EQ(m.num_stacks(), 1u);
  EXPECT_FALSE(m.overflowed());
}

/// ((t*|u)*|u)* nested `depth` deep: no repetition collapses, and each "t" has many readings.
std::string nested_alternatives(int depth) {
  std::string p = "t";
  for (int i = 0; i < depth; ++i) p = "(" + p + "*|u)";
  return p + "*";
}

// Readings that reach the same stack share its frames, so the stacks stay as many as the
// distinct ones (unshared, they multiplied with every byte).
TEST(Regex, EqualStacksAreOneNode) {
  matcher m(compile_regex(nested_alternatives(3)));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.accept_bytes(i % 7 ? "t" : "u")) << "byte " << i;
  EXPECT_LE(m.num_stacks(), 16u);
  EXPECT_FALSE(m.overflowed());
  EXPECT_TRUE(m.is_complete());
}

// A pattern whose readings multiply past max_closure_items(): the read fails at once, the state is
// kept, and overflowed() says why (the scheduler then ends the generation with an error).
TEST(Regex, AClosureTooLargeFailsTheReadInsteadOfGrowing) {
  auto g = compile_regex(nested_alternatives(20));
  auto words_g = compiled_grammar::compile(g->rules(), testing::make_vocab(testing::json_like_tokens()));
  matcher m(words_g);
  ASSERT_FALSE(m.overflowed());
  bool failed = false;
  for (int i = 0; i < 64 && !failed; ++i) {
    const size_t before = m.num_stacks();
    failed = !m.accept_bytes("t");
    if (failed) {
      EXPECT_EQ(m.num_stacks(), before);
    }
  }
  ASSERT_TRUE(failed);
  EXPECT_TRUE(m.overflowed());
  std::vector<uint32_t> words(m.compiled().vocab().mask_words());
  m.fill_next_token_bitmask(words);  // returns: every probe stops at the bound
  EXPECT_TRUE(m.overflowed());
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
