// The pushdown automaton over bytes (matcher) and the grammar builder, on grammars written as
// text, and the token masks against a brute force over the vocabulary.
#include <gtest/gtest.h>

#include "grammar/ebnf.hpp"
#include "grammar_test_util.hpp"

namespace actorserve::grammar {
namespace {

using testing::checked_walk;
using testing::json_like_tokens;
using testing::make_vocab;

std::shared_ptr<const compiled_grammar> compile_text(std::string_view text,
                                                     std::shared_ptr<const vocabulary> v = make_vocab({"a"})) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.err().message);
  if (!g.ok()) return nullptr;
  return compiled_grammar::compile(std::move(*g), std::move(v));
}

/// Whether the whole of `text` is a sentence of the grammar.
bool matches(const std::shared_ptr<const compiled_grammar>& g, std::string_view text) {
  matcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

TEST(Pda, LiteralsAndChoices) {
  auto g = compile_text(R"g(root ::= "ab" | "ac" | "a")g");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "ac"));
  EXPECT_TRUE(matches(g, "a"));
  EXPECT_FALSE(matches(g, "ad"));
  EXPECT_FALSE(matches(g, "abc"));
  matcher m(g);
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.can_continue());
  EXPECT_TRUE(m.accept_bytes("b"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
}

TEST(Pda, ARejectedByteLeavesTheStateAsItWas) {
  auto g = compile_text(R"g(root ::= "abc")g");
  matcher m(g);
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_FALSE(m.accept_bytes("bx"));
  EXPECT_FALSE(m.accept_bytes("c"));
  EXPECT_TRUE(m.accept_bytes("bc"));
  EXPECT_TRUE(m.is_complete());
}

TEST(Pda, NestingNeedsTheStack) {
  auto g = compile_text(R"g(root ::= "(" root ")" | "x")g");
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "((x))"));
  EXPECT_FALSE(matches(g, "((x)"));
  EXPECT_FALSE(matches(g, "(x))"));
  std::string deep = std::string(500, '(') + "x" + std::string(500, ')');
  EXPECT_TRUE(matches(g, deep));
}

TEST(Pda, RepetitionsAndBounds) {
  auto g = compile_text(R"g(root ::= [a-c]{2,4} "-" [0-9]+ "!"?)g");
  EXPECT_TRUE(matches(g, "ab-1"));
  EXPECT_TRUE(matches(g, "abca-123!"));
  EXPECT_FALSE(matches(g, "a-1"));
  EXPECT_FALSE(matches(g, "abcab-1"));
  EXPECT_FALSE(matches(g, "ab-"));
  EXPECT_FALSE(matches(g, "ab-1!!"));
  auto exact = compile_text(R"g(root ::= "x"{3})g");
  EXPECT_TRUE(matches(exact, "xxx"));
  EXPECT_FALSE(matches(exact, "xx"));
  EXPECT_FALSE(matches(exact, "xxxx"));
  auto at_least = compile_text(R"g(root ::= "x"{2,})g");
  EXPECT_FALSE(matches(at_least, "x"));
  EXPECT_TRUE(matches(at_least, "xx"));
  EXPECT_TRUE(matches(at_least, std::string(300, 'x')));
}

TEST(Pda, LongRepetitionsKeepTheStackFlat) {
  auto g = compile_text("root ::= item* \".\"\nitem ::= \"ab\" | \"c\"");
  matcher m(g);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.accept_bytes(i % 2 ? "ab" : "c"));
  EXPECT_LE(m.num_stacks(), 4u);
  EXPECT_TRUE(m.accept_bytes("."));
  EXPECT_TRUE(m.is_complete());
}

TEST(Pda, AmbiguousGrammarsKeepEveryReading) {
  auto g = compile_text(R"g(root ::= ("a" | "aa")* "b")g");
  EXPECT_TRUE(matches(g, "aaaab"));
  EXPECT_TRUE(matches(g, "b"));
  matcher m(g);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_LE(m.num_stacks(), 8u);
}

TEST(Pda, BuilderRefusesWhatWouldLoop) {
  EXPECT_FALSE(parse_ebnf(R"g(root ::= root "a" | "b")g").ok());
  EXPECT_FALSE(parse_ebnf(R"g(root ::= ("a"?)* "b")g").ok());
  EXPECT_FALSE(parse_ebnf(R"g(root ::= x)g").ok());
  EXPECT_FALSE(parse_ebnf(R"g(root ::= "a" root ::= "b")g").ok());
  auto err = parse_ebnf("a ::= \"x\"\n");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.err().message.find("no rule 'root'"), std::string::npos);
  // Right recursion through a nullable prefix is a tail call: fine.
  EXPECT_TRUE(parse_ebnf(R"g(root ::= "a" root | "")g").ok());
}

TEST(Pda, GrammarPrintsAsText) {
  auto g = parse_ebnf(R"g(root ::= "ab" [0-9]+ | "")g");
  ASSERT_TRUE(g.ok());
  const std::string text = g->to_string();
  EXPECT_NE(text.find("root ::= 'a' 'b' "), std::string::npos) << text;
  EXPECT_NE(text.find("[0-9]"), std::string::npos) << text;
}

TEST(TokenMask, MatchesBruteForceOnRandomWalks) {
  const char* grammars[] = {
      R"g(root ::= "{" (pair ("," " "? pair)*)? "}"
         pair ::= str ":" " "? val
         val ::= str | num | "null" | "[" (val ("," val)*)? "]" | root
         str ::= "\"" ([a-z ] | "\\" [n"\\])* "\""
         num ::= "-"? [0-9]+ ("." [0-9]+)?)g",
      R"g(root ::= [a-c]{0,5} "\"" ([a-z]{2,3} ",")* "}")g",
      R"g(root ::= ("ab" | "a" | "b")* "\"" x "\"" x ":"
         x ::= "n" "u"? "l"*)g",
      R"g(root ::= "(" root ")" root | "")g",
      R"g(root ::= ([\xC3] [\xA9] | [\xE6] [\x97] [\xA5] | [a-z])+ "\"")g",
  };
  auto vocab = make_vocab(json_like_tokens());
  std::mt19937 rng(7);
  for (const char* text : grammars) {
    auto g = compile_text(text, vocab);
    ASSERT_NE(g, nullptr) << text;
    for (int walk = 0; walk < 30; ++walk) checked_walk(g, rng, 40);
  }
}

TEST(TokenMask, DeepRepetitionLevelsShareTables) {
  auto vocab = make_vocab({"a", "aa", "aaa", "b", "\""});
  auto g = compile_text(R"g(root ::= "a"{0,50} "\"" | "b"{20,40} "\"")g", vocab);
  ASSERT_NE(g, nullptr);
  EXPECT_LT(g->stats().num_tables, g->stats().num_positions);
  std::mt19937 rng(3);
  for (int walk = 0; walk < 50; ++walk) checked_walk(g, rng, 60);
  // The bound holds exactly: 50 a's, then only the quote.
  matcher m(g);
  ASSERT_TRUE(m.accept_bytes(std::string(48, 'a')));
  std::vector<uint32_t> words(vocab->mask_words());
  m.fill_next_token_bitmask(words);
  EXPECT_EQ(testing::allowed_ids(words, vocab->size()), (std::vector<int32_t>{0, 1, 4}));
}

}  // namespace
}  // namespace actorserve::grammar
