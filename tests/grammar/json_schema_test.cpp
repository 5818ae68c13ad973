// The JSON Schema compiler, keyword by keyword: texts the grammar must accept and reject, and
// the keywords it refuses (by name).
#include <gtest/gtest.h>

#include "grammar/constraint.hpp"
#include "grammar/json_schema.hpp"
#include "grammar_test_util.hpp"

namespace actorserve::grammar {
namespace {

/// A compiled schema checked on whole texts.
class schema {
 public:
  explicit schema(std::string_view json) {
    auto g = json_schema_grammar(json, "json_schema");
    EXPECT_TRUE(g.ok()) << json << ": " << (g.ok() ? "" : g.err().message);
    if (g.ok()) compiled_ = compiled_grammar::compile(std::move(*g), testing::make_vocab({"a"}));
  }
  bool accepts(std::string_view text) const {
    if (!compiled_) return false;
    matcher m(compiled_);
    return m.accept_bytes(text) && m.is_complete();
  }

 private:
  std::shared_ptr<const compiled_grammar> compiled_;
};

/// The error of a refused schema.
std::string refusal(std::string_view json) {
  auto g = json_schema_grammar(json, "response_format.json_schema.schema");
  return g.ok() ? std::string("(compiled)") : g.err().message;
}

TEST(JsonSchema, ScalarTypes) {
  schema s(R"({"type": "string"})");
  EXPECT_TRUE(s.accepts(R"("hi")"));
  EXPECT_TRUE(s.accepts(R"("")"));
  EXPECT_TRUE(s.accepts(R"("a\"b\\c\n\u00e9")"));
  EXPECT_TRUE(s.accepts("\"caf\xC3\xA9\""));
  EXPECT_FALSE(s.accepts("\"a\nb\""));           // raw control characters are not JSON
  EXPECT_FALSE(s.accepts(R"("\ud83d")"));        // surrogate escapes are not generated
  EXPECT_FALSE(s.accepts("\"\xC3\""));           // broken UTF-8
  EXPECT_FALSE(s.accepts("1"));
  schema i(R"({"type": "integer"})");
  EXPECT_TRUE(i.accepts("0"));
  EXPECT_TRUE(i.accepts("-12"));
  EXPECT_FALSE(i.accepts("012"));
  EXPECT_FALSE(i.accepts("1.5"));
  schema n(R"({"type": "number"})");
  EXPECT_TRUE(n.accepts("-0.5e+10"));
  EXPECT_TRUE(n.accepts("3"));
  EXPECT_FALSE(n.accepts("1."));
  EXPECT_FALSE(n.accepts(".5"));
  schema b(R"({"type": "boolean"})");
  EXPECT_TRUE(b.accepts("true"));
  EXPECT_FALSE(b.accepts("null"));
  schema z(R"({"type": "null"})");
  EXPECT_TRUE(z.accepts("null"));
  schema multi(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(multi.accepts("null"));
  EXPECT_TRUE(multi.accepts(R"("x")"));
  EXPECT_FALSE(multi.accepts("1"));
}

TEST(JsonSchema, ObjectsInSchemaOrderWithOptionalProperties) {
  schema s(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
              "c": {"type": "boolean"}}, "required": ["a", "c"], "additionalProperties": false})");
  EXPECT_TRUE(s.accepts(R"({"a":1,"c":true})"));
  EXPECT_TRUE(s.accepts(R"({"a": 1, "b": "x", "c": false})"));
  EXPECT_FALSE(s.accepts(R"({"c":true,"a":1})"));   // schema order
  EXPECT_FALSE(s.accepts(R"({"a":1})"));            // c is required
  EXPECT_FALSE(s.accepts(R"({"a":1,"c":true,"d":1})"));
  EXPECT_FALSE(s.accepts(R"({ "a":1,"c":true})"));  // whitespace is bounded
  EXPECT_FALSE(s.accepts(R"({"a":1,  "c":true})"));
  schema all_optional(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})");
  EXPECT_TRUE(all_optional.accepts("{}"));
  EXPECT_TRUE(all_optional.accepts(R"({"b":2})"));
  EXPECT_TRUE(all_optional.accepts(R"({"a":1,"b":2})"));
  EXPECT_FALSE(all_optional.accepts(R"({"x":1})"));  // absent additionalProperties: none generated
}

TEST(JsonSchema, AdditionalProperties) {
  schema any(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                "additionalProperties": true})");
  EXPECT_TRUE(any.accepts(R"({"id":1})"));
  EXPECT_TRUE(any.accepts(R"({"id":1,"x":[1,{"y":null}],"i":"z"})"));
  EXPECT_FALSE(any.accepts(R"({"id":1,"id":2})"));  // a listed name is never an extra one
  EXPECT_TRUE(any.accepts(R"({"id":1,"idx":2})"));
  schema typed(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(typed.accepts(R"({"a":1,"b":2})"));
  EXPECT_FALSE(typed.accepts(R"({"a":"x"})"));
  schema req(R"({"type": "object", "required": ["k"], "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(req.accepts(R"({"k":"v"})"));
  EXPECT_FALSE(req.accepts(R"({"k":1})"));
}

TEST(JsonSchema, Arrays) {
  schema s(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
  EXPECT_FALSE(s.accepts("[1]"));
  EXPECT_TRUE(s.accepts("[1,2]"));
  EXPECT_TRUE(s.accepts("[1, 2, 3]"));
  EXPECT_FALSE(s.accepts("[1,2,3,4]"));
  EXPECT_FALSE(s.accepts(R"([1,"2"])"));
  schema any(R"({"type": "array"})");
  EXPECT_TRUE(any.accepts("[]"));
  EXPECT_TRUE(any.accepts(R"([1,"a",[],{}])"));
  schema tuple(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})");
  EXPECT_TRUE(tuple.accepts("[]"));
  EXPECT_TRUE(tuple.accepts(R"(["a"])"));
  EXPECT_TRUE(tuple.accepts(R"(["a",1])"));
  EXPECT_FALSE(tuple.accepts(R"(["a",1,2])"));
  EXPECT_FALSE(tuple.accepts("[1]"));
  schema tuple_min(R"({"type": "array", "prefixItems": [{"const": 1}, {"const": 2}], "minItems": 2,
                     "items": {"type": "boolean"}})");
  EXPECT_FALSE(tuple_min.accepts("[1]"));
  EXPECT_TRUE(tuple_min.accepts("[1,2]"));
  EXPECT_TRUE(tuple_min.accepts("[1,2,true,false]"));
  schema draft7(R"({"type": "array", "items": [{"type": "null"}], "additionalItems": false})");
  EXPECT_TRUE(draft7.accepts("[null]"));
  EXPECT_FALSE(draft7.accepts("[null,null]"));
}

TEST(JsonSchema, EnumConstAnyOf) {
  schema e(R"({"enum": ["red", "green", 3, null, {"a": [1]}]})");
  EXPECT_TRUE(e.accepts(R"("red")"));
  EXPECT_TRUE(e.accepts("3"));
  EXPECT_TRUE(e.accepts("null"));
  EXPECT_TRUE(e.accepts(R"({"a":[1]})"));
  EXPECT_FALSE(e.accepts(R"("blue")"));
  schema typed_enum(R"({"type": "string", "enum": ["a", 1]})");
  EXPECT_TRUE(typed_enum.accepts(R"("a")"));
  EXPECT_FALSE(typed_enum.accepts("1"));
  schema c(R"({"const": "only"})");
  EXPECT_TRUE(c.accepts(R"("only")"));
  EXPECT_FALSE(c.accepts(R"("other")"));
  schema any_of(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})");
  EXPECT_TRUE(any_of.accepts("5"));
  EXPECT_TRUE(any_of.accepts(R"("x")"));
  EXPECT_FALSE(any_of.accepts(R"("xy")"));
  schema one_of(R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})");
  EXPECT_TRUE(one_of.accepts("null"));
  schema all_of(R"({"allOf": [{"type": "boolean"}], "description": "annotations are fine"})");
  EXPECT_TRUE(all_of.accepts("false"));
}

TEST(JsonSchema, RefsNestedAndRecursive) {
  schema tree(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                   "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"],
                   "additionalProperties": false}},
                 "$ref": "#/$defs/node"})");
  EXPECT_TRUE(tree.accepts(R"({"v":1})"));
  EXPECT_TRUE(tree.accepts(R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_FALSE(tree.accepts(R"({"v":1,"kids":[{"kids":[]}]})"));
  schema defs(R"({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"type": "boolean"}},
                 "type": "object", "properties": {"x": {"$ref": "#/definitions/a"}}, "required": ["x"]})");
  EXPECT_TRUE(defs.accepts(R"({"x":true})"));
  schema root_ref(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                     "required": ["next"]})");
  EXPECT_TRUE(root_ref.accepts(R"({"next":{"next":null}})"));
}

TEST(JsonSchema, StringLengths) {
  schema s(R"({"type": "string", "minLength": 2, "maxLength": 4})");
  EXPECT_FALSE(s.accepts(R"("a")"));
  EXPECT_TRUE(s.accepts(R"("ab")"));
  EXPECT_TRUE(s.accepts("\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\""));  // four characters, eight bytes
  EXPECT_TRUE(s.accepts(R"("\n\u0041")"));                         // escapes count as one
  EXPECT_FALSE(s.accepts(R"("abcde")"));
  schema at_least(R"({"type": "string", "minLength": 3})");
  EXPECT_FALSE(at_least.accepts(R"("ab")"));
  EXPECT_TRUE(at_least.accepts(R"("abcdefghijklmnop")"));
}

TEST(JsonSchema, Patterns) {
  schema zip(R"({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"})");
  EXPECT_TRUE(zip.accepts(R"("12345")"));
  EXPECT_TRUE(zip.accepts(R"("12345-6789")"));
  EXPECT_FALSE(zip.accepts(R"("1234")"));
  EXPECT_FALSE(zip.accepts(R"("x12345")"));
  schema contains(R"({"type": "string", "pattern": "ab"})");  // unanchored: anywhere
  EXPECT_TRUE(contains.accepts(R"("xxabyy")"));
  EXPECT_TRUE(contains.accepts(R"("ab")"));
  EXPECT_FALSE(contains.accepts(R"("a b")"));
  schema quote(R"({"type": "string", "pattern": "^a\"b$"})");  // the decoded value holds a quote
  EXPECT_TRUE(quote.accepts(R"("a\"b")"));
}

TEST(JsonSchema, Formats) {
  schema date(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(date.accepts(R"("2024-02-29")"));
  EXPECT_FALSE(date.accepts(R"("2023-02-29")"));
  EXPECT_TRUE(date.accepts(R"("2000-02-29")"));
  EXPECT_FALSE(date.accepts(R"("1900-02-29")"));
  EXPECT_FALSE(date.accepts(R"("2024-04-31")"));
  EXPECT_FALSE(date.accepts(R"("2024-13-01")"));
  schema time(R"({"type": "string", "format": "time"})");
  EXPECT_TRUE(time.accepts(R"("23:59:59Z")"));
  EXPECT_TRUE(time.accepts(R"("08:00:00.125+05:30")"));
  EXPECT_FALSE(time.accepts(R"("24:00:00Z")"));
  EXPECT_FALSE(time.accepts(R"("08:00:00")"));
  schema dt(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(dt.accepts(R"("2024-01-31T12:00:00Z")"));
  schema uuid(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(uuid.accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(uuid.accepts(R"("123e4567e89b12d3a456426614174000")"));
  schema email(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(email.accepts(R"("a.b+c@example.co.uk")"));
  EXPECT_FALSE(email.accepts(R"("a@b")"));
  EXPECT_FALSE(email.accepts(R"("a..b@example.com")"));
  schema ip(R"({"type": "string", "format": "ipv4"})");
  EXPECT_TRUE(ip.accepts(R"("192.168.0.255")"));
  EXPECT_FALSE(ip.accepts(R"("256.1.1.1")"));
  EXPECT_FALSE(ip.accepts(R"("01.1.1.1")"));
  schema host(R"({"type": "string", "format": "hostname"})");
  EXPECT_TRUE(host.accepts(R"("api.example.com")"));
  EXPECT_FALSE(host.accepts(R"("-bad.com")"));
}

TEST(JsonSchema, NumberBounds) {
  schema i(R"({"type": "integer", "minimum": -15, "exclusiveMaximum": 120})");
  for (int v = -200; v <= 200; ++v) EXPECT_EQ(i.accepts(std::to_string(v)), v >= -15 && v < 120) << v;
  schema pos(R"({"type": "integer", "exclusiveMinimum": 0})");
  EXPECT_FALSE(pos.accepts("0"));
  EXPECT_TRUE(pos.accepts("123456789"));
  EXPECT_FALSE(pos.accepts("-1"));
  schema n(R"({"type": "number", "minimum": 0, "maximum": 10})");
  EXPECT_TRUE(n.accepts("0"));
  EXPECT_TRUE(n.accepts("9.999"));
  EXPECT_TRUE(n.accepts("10"));
  EXPECT_TRUE(n.accepts("10.000"));
  EXPECT_FALSE(n.accepts("10.001"));
  EXPECT_FALSE(n.accepts("-0.5"));
  EXPECT_FALSE(n.accepts("1e2"));
  schema neg(R"({"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 0})");
  EXPECT_TRUE(neg.accepts("-1.5"));
  EXPECT_TRUE(neg.accepts("-0.001"));
  EXPECT_FALSE(neg.accepts("-2"));
  EXPECT_TRUE(neg.accepts("-1.999"));
  EXPECT_FALSE(neg.accepts("0"));
  EXPECT_FALSE(neg.accepts("-0"));
  schema draft4(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})");
  EXPECT_FALSE(draft4.accepts("5"));
  EXPECT_TRUE(draft4.accepts("6"));
}

TEST(JsonSchema, RefusalsNameTheKeyword) {
  struct refused_case {
    const char* schema;
    const char* keyword;
  };
  const refused_case cases[] = {
      {R"({"not": {"type": "string"}})", "'not'"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "'patternProperties'"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "'contains'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"type": "integer", "multipleOf": 3})", "'multipleOf'"},
      {R"({"type": "number", "minimum": 0.5})", "'minimum'"},
      {R"({"type": "string", "format": "uri"})", "'format'"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "backreference"},
      {R"j({"type": "string", "pattern": "a(?=b)"})j", "lookahead"},
      {R"({"type": "string", "maxLength": 100000})", "'maxLength'"},
      {R"({"if": {}, "then": {}})", "'if'"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "'allOf'"},
      {R"({"$ref": "http://example.com/s.json"})", "'$ref'"},
      {R"({"$ref": "#/$defs/missing"})", "'$ref'"},
      {R"({"type": "string", "nullable": true})", "'nullable'"},
      {R"({"anyOf": [{"type": "string"}], "type": "string"})", "'anyOf'"},
      {R"({"type": "string", "pattern": "a", "maxLength": 3})", "'pattern'"},
  };
  for (const auto& c : cases) {
    const std::string why = refusal(c.schema);
    EXPECT_NE(why.find(c.keyword), std::string::npos) << c.schema << " -> " << why;
    EXPECT_EQ(why.rfind("response_format.json_schema.schema: ", 0), 0u) << why;
  }
  EXPECT_NE(refusal("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"not": {}}}})").find("#/properties/a"), std::string::npos);
}

// The matcher's bound on a closure grows with the grammar: a choice among 4,096 strings (the most
// guided_choice takes) and an enum of 6,000 open with that many stacks and are followed.
TEST(Constraints, LargeChoicesStayWithinTheMatchersBound) {
  grammar_compiler compiler(testing::make_vocab(testing::json_like_tokens()));
  constraint_spec choice;
  choice.type = constraint_spec::kind::choice;
  choice.field = "guided_choice";
  for (int i = 0; i < 4096; ++i) choice.choices.push_back("c" + std::to_string(i));
  constraint_spec schema;
  schema.type = constraint_spec::kind::json_schema;
  schema.field = "response_format.json_schema.schema";
  schema.text = R"({"enum": [)";
  for (int i = 0; i < 6000; ++i) schema.text += (i ? ", \"" : "\"") + std::to_string(i) + "x\"";
  schema.text += "]}";
  for (const auto& [spec, text] : {std::pair{choice, std::string("c4095")}, std::pair{schema, std::string("\"5999x\"")}}) {
    auto g = compiler.compile(spec);
    ASSERT_TRUE(g.ok()) << spec.field << ": " << g.err().message;
    matcher m(*g);
    EXPECT_GE(m.num_stacks(), 4096u) << spec.field;
    EXPECT_GE(m.max_closure_items(), matcher::closure_items_per_element * (*g)->rules().num_elements()) << spec.field;
    EXPECT_TRUE(m.accept_bytes(text) && m.is_complete()) << spec.field;
    EXPECT_FALSE(m.overflowed()) << spec.field;
  }
}

TEST(Constraints, ChoiceRegexJsonObjectAndToolCalls) {
  auto compile = [](const constraint_spec& spec) {
    auto g = constraint_grammar(spec);
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.err().message);
    return compiled_grammar::compile(std::move(*g), testing::make_vocab({"a"}));
  };
  auto accepts = [](const std::shared_ptr<const compiled_grammar>& g, std::string_view text) {
    matcher m(g);
    return m.accept_bytes(text) && m.is_complete();
  };
  constraint_spec choice;
  choice.type = constraint_spec::kind::choice;
  choice.choices = {"yes", "no", "maybe so"};
  auto c = compile(choice);
  EXPECT_TRUE(accepts(c, "maybe so"));
  EXPECT_FALSE(accepts(c, "yes "));
  constraint_spec regex;
  regex.type = constraint_spec::kind::regex;
  regex.text = "[A-Z][a-z]+ \\d{2}";
  auto r = compile(regex);
  EXPECT_TRUE(accepts(r, "Hello 42"));
  EXPECT_FALSE(accepts(r, "hello 42"));
  constraint_spec obj;
  auto o = compile(obj);
  EXPECT_TRUE(accepts(o, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(o, "[1]"));
  EXPECT_FALSE(accepts(o, "{} "));
  constraint_spec tools;
  tools.type = constraint_spec::kind::tool_calls;
  tools.tools = {{"get_weather", R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"},
                 {"now", ""}};
  tools.field = "tools";
  auto t = compile(tools);
  EXPECT_TRUE(accepts(t, R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])"));
  EXPECT_TRUE(accepts(t, R"([{"name":"now","parameters":{}},{"name":"now","parameters":{}}])"));
  EXPECT_FALSE(accepts(t, R"([{"name": "other", "parameters": {}}])"));
  EXPECT_FALSE(accepts(t, "[]"));
  tools.parallel_tool_calls = false;
  auto single = compile(tools);
  EXPECT_FALSE(accepts(single, R"([{"name":"now","parameters":{}},{"name":"now","parameters":{}}])"));
  constraint_spec named = tools;
  named.type = constraint_spec::kind::tool_arguments;
  auto n = compile(named);
  EXPECT_TRUE(accepts(n, R"({"city": "Oslo"})"));
  constraint_spec bad_regex;
  bad_regex.type = constraint_spec::kind::regex;
  bad_regex.text = "a\\bb";
  bad_regex.field = "guided_regex";
  auto err = constraint_grammar(bad_regex);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.err().message.rfind("guided_regex: ", 0), 0u) << err.err().message;
  EXPECT_NE(err.err().message.find("\\b"), std::string::npos);
}

}  // namespace
}  // namespace actorserve::grammar
