// Property tests: random schemas, random generations under them (tokens drawn from the mask of
// a JSON-like vocabulary); every completed output must parse and validate against its schema
// (json_validator.hpp, written without grammar code), and every mask must equal the brute force.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "grammar/constraint.hpp"
#include "grammar/json_schema.hpp"
#include "grammar_test_util.hpp"
#include "json_validator.hpp"

namespace actorserve::grammar {
namespace {

/// Random schemas over the keywords the compiler honours. Bounds stay small so that random
/// generations finish.
class schema_maker {
 public:
  explicit schema_maker(uint32_t seed) : rng_(seed) {}

  std::string make() {
    defs_.clear();
    std::string body = node(0);
    if (defs_.empty()) return body;
    std::string defs;
    for (size_t i = 0; i < defs_.size(); ++i) defs += fmt::format("{}\"d{}\": {}", i ? ", " : "", i, defs_[i]);
    return fmt::format(R"({{"$defs": {{{}}}, "allOf": [{}]}})", defs, body);
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  std::string node(int depth) {
    const int kind = depth > 2 ? pick(6) : pick(11);
    switch (kind) {
      case 0: {
        switch (pick(5)) {
          case 0: return R"({"type": "string", "maxLength": 6})";
          case 1: return fmt::format(R"({{"type": "string", "minLength": {}, "maxLength": {}}})", pick(3), 3 + pick(3));
          case 2: {
            const char* formats[] = {"date", "time", "date-time", "uuid", "email", "ipv4", "hostname"};
            return fmt::format(R"({{"type": "string", "format": "{}"}})", formats[pick(7)]);
          }
          case 3: {
            const char* patterns[] = {"^[a-c]{1,3}$", "^x(y|zz)?$", "^[0-9]{2}-[A-Z]$", "q", "^a\\\"b$"};
            return fmt::format(R"({{"type": "string", "pattern": "{}"}})", patterns[pick(5)]);
          }
          default: return R"({"type": "string", "enum": ["alpha", "be\"ta", "gamma"]})";
        }
      }
      case 1: {
        const int lo = pick(200) - 100;
        return fmt::format(R"({{"type": "integer", "minimum": {}, "maximum": {}}})", lo, lo + pick(300));
      }
      case 2: {
        const int lo = pick(20) - 10;
        return fmt::format(R"({{"type": "number", "exclusiveMinimum": {}, "maximum": {}}})", lo, lo + 1 + pick(20));
      }
      case 3: return pick(2) ? R"({"type": "boolean"})" : R"({"type": ["null", "integer"], "maximum": 9, "minimum": 0})";
      case 4: return fmt::format(R"({{"const": {}}})", pick(2) ? "\"c\"" : "[1,{\"k\":null}]");
      case 5: return R"({"enum": [1, "two", null, true]})";
      case 6: {
        return fmt::format(R"({{"type": "array", "items": {}, "minItems": {}, "maxItems": {}}})", node(depth + 1),
                           pick(2), 2 + pick(2));
      }
      case 7: {
        const int n = 1 + pick(3);
        std::string props, required;
        for (int i = 0; i < n; ++i) {
          props += fmt::format("{}\"p{}\": {}", i ? ", " : "", i, node(depth + 1));
          if (pick(2)) required += fmt::format("{}\"p{}\"", required.empty() ? "" : ", ", i);
        }
        const char* extra[] = {"false", "false", R"({"type": "integer", "minimum": 0, "maximum": 9})", "true"};
        return fmt::format(R"({{"type": "object", "properties": {{{}}}, "required": [{}], "additionalProperties": {}}})",
                           props, required, extra[pick(depth > 1 ? 3 : 4)]);
      }
      case 8: return fmt::format(R"({{"anyOf": [{}, {}]}})", node(depth + 1), node(depth + 1));
      case 9: {
        defs_.push_back(node(depth + 1));
        return fmt::format(R"({{"$ref": "#/$defs/d{}"}})", defs_.size() - 1);
      }
      default:
        return fmt::format(R"({{"type": "array", "prefixItems": [{}, {}], "items": false}})", node(depth + 1),
                           node(depth + 1));
    }
  }

  std::mt19937 rng_;
  std::vector<std::string> defs_;
};

/// Generates under `g` drawing tokens from the mask (EOS taken at once when allowed); returns
/// the output when the grammar completed within `steps`.
std::optional<std::string> generate(const std::shared_ptr<const compiled_grammar>& g, std::mt19937& rng, int steps,
                                    bool check_masks) {
  matcher m(g);
  const vocabulary& v = g->vocab();
  std::vector<uint32_t> words(v.mask_words());
  std::string out;
  for (int s = 0; s < steps; ++s) {
    if (m.is_complete() && (!m.can_continue() || rng() % 3 == 0)) return out;
    m.fill_next_token_bitmask(words);
    if (check_masks) {
      EXPECT_EQ(words, testing::brute_force_mask(m)) << out;
    }
    auto ids = testing::allowed_ids(words, v.size());
    // Nothing allowed before the grammar completes is a bug of the mask or the grammar.
    EXPECT_FALSE(ids.empty()) << "stuck after " << out;
    if (ids.empty()) return std::nullopt;
    // Prefer short tokens that close things now and then, so that generations finish.
    int32_t id = ids[rng() % ids.size()];
    if (rng() % 2 == 0) {
      for (int tries = 0; tries < 8; ++tries) {
        const int32_t cand = ids[rng() % ids.size()];
        if (v.bytes(cand).find_first_of("\"}]") != std::string_view::npos) {
          id = cand;
          break;
        }
      }
    }
    const auto& term = v.terminators();
    if (std::find(term.begin(), term.end(), id) != term.end()) return out;
    EXPECT_TRUE(m.accept_token(id));
    out += v.bytes(id);
  }
  return std::nullopt;
}

TEST(SchemaProperty, CompletedOutputsValidate) {
  auto vocab = testing::make_vocab(testing::json_like_tokens());
  int completed = 0, schemas = 0;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    schema_maker maker(seed);
    const std::string text = maker.make();
    auto g = json_schema_grammar(text, "json_schema");
    ASSERT_TRUE(g.ok()) << text << ": " << g.err().message;
    auto compiled = compiled_grammar::compile(std::move(*g), vocab);
    testing::json_validator validator(text);
    ++schemas;
    std::mt19937 rng(seed * 7919);
    for (int walk = 0; walk < 6; ++walk) {
      auto out = generate(compiled, rng, 400, walk == 0 && seed % 10 == 0);
      if (!out) continue;
      ++completed;
      std::string why;
      EXPECT_TRUE(validator.valid(*out, &why)) << "schema " << text << "\noutput " << *out << "\n" << why;
    }
  }
  // Most generations finish (the schemas' languages are small); a few run out of steps.
  EXPECT_GT(completed, schemas * 3);
}

TEST(SchemaProperty, JsonObjectOutputsParse) {
  auto vocab = testing::make_vocab(testing::json_like_tokens());
  auto g = constraint_grammar({});
  ASSERT_TRUE(g.ok());
  auto compiled = compiled_grammar::compile(std::move(*g), vocab);
  testing::json_validator validator(R"({"type": "object"})");
  std::mt19937 rng(99);
  int completed = 0;
  for (int walk = 0; walk < 200; ++walk) {
    auto out = generate(compiled, rng, 300, walk < 5);
    if (!out) continue;
    ++completed;
    std::string why;
    EXPECT_TRUE(validator.valid(*out, &why)) << *out << ": " << why;
  }
  EXPECT_GT(completed, 20);
}

}  // namespace
}  // namespace actorserve::grammar
