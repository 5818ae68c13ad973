// The compile's work budget (grammar_compiler::compile_work): a short constraint whose readings
// multiply is refused at once with an error naming its field, the count is exact (not a clock),
// and large legitimate grammars stay well within it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "grammar/constraint.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/finite_constraints.hpp"
#include "grammar_test_util.hpp"

namespace actorserve::grammar {
namespace {

using namespace std::chrono_literals;

/// ((t*|t)*|t)* nested `depth` deep: each byte has a reading per way of splitting it among the levels.
std::string nested_repetitions(int depth) {
  std::string p = "t";
  for (int i = 0; i < depth; ++i) p = "(" + p + "*|t)";
  return p + "*";
}

// 250 nested repetitions compiled in about 2 s (this 2-core machine, RelWithDebInfo) before the
// budget; now the first closure past its bound ends the compile in milliseconds (the
// bound leaves room for sanitizer builds, ~10x slower), every time: a refusal is not cached.
TEST(CompileBudget, NestedRepetitionsAreRefusedAtOnceNamingTheField) {
  grammar_compiler compiler(testing::make_vocab(testing::json_like_tokens()));
  const constraint_spec specs[] = {
      testing::constraint_of(constraint_spec::kind::regex, nested_repetitions(250).c_str(), "guided_regex"),
      testing::constraint_of(constraint_spec::kind::json_schema,
                             (R"({"type": "string", "pattern": "^)" + nested_repetitions(250) + R"($"})").c_str(),
                             "response_format.json_schema.schema"),
  };
  for (const auto& spec : specs) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const auto start = std::chrono::steady_clock::now();
      auto g = compiler.compile(spec);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << spec.field;
      ASSERT_FALSE(g.ok()) << spec.field;
      EXPECT_EQ(g.err().code, error_code::invalid_argument);
      EXPECT_EQ(g.err().message, spec.field + ": " + grammar_compiler::too_complex_message());
    }
  }
  EXPECT_NE(grammar_compiler::too_complex_message().find("too complex to compile"), std::string::npos);
  // The compiler goes on compiling; the shallow form of the same pattern is within the bound.
  const auto shallow = nested_repetitions(20);
  EXPECT_TRUE(compiler.compile(testing::constraint_of(constraint_spec::kind::regex, shallow.c_str(), "guided_regex")));
}

// The budget counts units of work, so a grammar needing W units compiles within W and not within
// W - 1, and one whose largest closure is C frames compiles with a closure bound of C, not C - 1.
TEST(CompileBudget, WorkIsCountedExactly) {
  const auto vocab = testing::make_vocab(testing::json_like_tokens());
  auto g = constraint_grammar(testing::record_schema_spec());
  ASSERT_TRUE(g.ok()) << g.err().message;
  const auto full = compiled_grammar::compile(*g, vocab);
  const uint64_t work = full->stats().work;
  const uint64_t closure = full->stats().largest_closure;
  ASSERT_GT(work, 0u);
  ASSERT_GT(closure, 1u);
  auto within = [&](compiled_grammar::work_budget b) { return compiled_grammar::compile_within(*g, vocab, b); };
  const auto exact = within({work, 0});
  ASSERT_NE(exact, nullptr);
  EXPECT_EQ(exact->stats().work, work);
  EXPECT_EQ(within({work - 1, 0}), nullptr);
  // The per-position part: one unit per computed table, on top of a floor that alone is short.
  const uint64_t tables = full->stats().num_tables;
  EXPECT_NE(within({work - tables, 1}), nullptr);
  EXPECT_EQ(within({work - tables - 1, 1}), nullptr);
  compiled_grammar::work_budget closure_bound;
  closure_bound.closure_floor = closure;
  EXPECT_NE(within(closure_bound), nullptr);
  closure_bound.closure_floor = closure - 1;
  EXPECT_EQ(within(closure_bound), nullptr);
}

// Large real grammars (the largest choice guided_choice takes, a 6,000-value enum, an object of
// 500 properties, the record schema, any JSON object) use under a third of the budget and of the
// closure bound.
TEST(CompileBudget, LargeGrammarsStayWellWithinIt) {
  const auto vocab = testing::make_vocab(testing::json_like_tokens());
  constraint_spec choice = testing::constraint_of(constraint_spec::kind::choice, "", "guided_choice");
  for (int i = 0; i < 4096; ++i) choice.choices.push_back("choice number " + std::to_string(i));
  std::string enum_schema = R"({"enum": [)";
  for (int i = 0; i < 6000; ++i) enum_schema += (i ? ", \"" : "\"") + std::to_string(i) + "x\"";
  enum_schema += "]}";
  std::string object_schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 500; ++i)
    object_schema += (i ? ", \"p" : "\"p") + std::to_string(i) + R"(": {"type": "integer"})";
  object_schema += "}}";
  const constraint_spec specs[] = {
      choice,
      testing::constraint_of(constraint_spec::kind::json_schema, enum_schema.c_str(), "enum"),
      testing::constraint_of(constraint_spec::kind::json_schema, object_schema.c_str(), "object"),
      testing::record_schema_spec(),
      testing::constraint_of(constraint_spec::kind::json_object, "", "json_object"),
  };
  const auto& budget = grammar_compiler::compile_work;
  for (const auto& spec : specs) {
    auto g = constraint_grammar(spec);
    ASSERT_TRUE(g.ok()) << spec.field << ": " << g.err().message;
    const auto compiled = compiled_grammar::compile(std::move(*g), vocab);
    const compile_stats& s = compiled->stats();
    EXPECT_LE(3 * s.work, budget.floor + budget.per_position * s.num_tables) << spec.field;
    EXPECT_LE(3 * s.largest_closure,
              std::max(budget.closure_floor, budget.closure_per_element * compiled->rules().num_elements()))
        << spec.field;
  }
}

}  // namespace
}  // namespace actorserve::grammar
