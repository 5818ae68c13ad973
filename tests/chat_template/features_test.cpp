/// One small template per Jinja feature the chat templates use, with the expected text written
/// out (and checked against Python jinja2 3.1 in transformers' environment).
#include <gtest/gtest.h>

#include <ctime>

#include "render_helpers.hpp"

namespace {

/// The variables every feature case renders with: four messages (one assistant turn with
/// tool_calls, one user turn whose content is a list of parts); `tools` is left undefined.
const char* kContext = R"({"messages": [
  {"role": "system", "content": "Sys"},
  {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": "x"}}}]},
  {"role": "user", "content": [{"type": "text", "text": "part1"}, {"type": "image"}, {"type": "text", "text": "part2"}]}]})";

struct feature_case {
  const char* name;
  const char* source;
  const char* expected;
};

const feature_case kCases[] = {
    {"LoopVariables",
     "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }} {% endfor %}",
     "1/4:0TrueFalse4 2/4:1FalseFalse3 3/4:2FalseFalse2 4/4:3FalseTrue1 "},
    {"LoopFilterCountsOnlyKeptItems",
     "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }} {{ m.role }};{% endfor %}",
     "1/2 user;2/2 user;"},
    {"ForElseWhenEmpty",
     "{% for m in messages if m.role == 'nobody' %}x{% else %}none{% endfor %}",
     "none"},
    {"BreakAndContinue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "0134"},
    {"IfElifElse",
     "{% for m in messages %}{% if m.role == 'system' %}S{% elif m.role == 'user' %}U{% else %}A{% endif %}{% endfor %}",
     "SUAU"},
    {"NamespaceCarriesStateOutOfLoops",
     "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "4 suau"},
    {"LoopBodySetDoesNotLeak",
     "{% set x = 1 %}{% for i in range(3) %}[{{ x }}]{% set x = 2 %}{% endfor %}{{ x }}",
     "[1][1][1]1"},
    {"SetForms",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set d %}inner {{ a }}{% endset %}{{ d }}|{% set e | upper %}up{% endset %}{{ e }}",
     "12 inner 1|UP"},
    {"Macro",
     "{% macro tag(name, body='-') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag(body='y', name='c') }}",
     "<a>-</a><b>x</b><c>y</c>"},
    {"WhitespaceControl",
     "a  {{- ' b ' -}}  c\n  {%- if true %} d {% endif -%}\n  e {# note #} f {#- note -#} g",
     "a b c d e  fg"},
    {"TrimAndLstripBlocks",
     "<\n  {% if true %}\n  x\n  {% endif %}\n  y {% if true %} z{% endif %}  \n>",
     "<\n  x\n  y  z  \n>"},
    {"PlusOptsOutOfLstripAndTrim",
     "<\n  {%+ if true +%}\n  x\n{% endif %}>",
     "<\n  \n  x\n>"},
    {"Comments",
     "a{# one #}b\n  {# two #}\nc",
     "ab\nc"},
    {"ConcatAndArithmetic",
     "{{ 'a' ~ 1 ~ none }} {{ 'x' + 'y' }} {{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 10 / 4 }} {{ 0.1 + 0.2 }} {{ 'ab' * 2 }}",
     "a1None xy 5.0 3 2 1024 2.5 0.30000000000000004 abab"},
    {"Comparisons",
     "{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 3 <= 2 }} {{ 'b' > 'a' }} {{ 1 < 2 < 3 }} {{ true == 1 }}",
     "True True True False True True True"},
    {"LogicReturnsOperands",
     "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not none }} {{ '' or [] }}|{{ none and 1 }}",
     "x y True []|None"},
    {"InAndNotIn",
     "{{ 'b' in 'abc' }} {{ 'user' in messages|map(attribute='role') }} {{ 'role' in messages[0] }} {{ 'tool_calls' not in messages[1] }}",
     "True True True True"},
    {"Tests",
     "{{ messages[3].content is string }} {{ messages[0].content is string }} {{ messages[2] is mapping }} {{ tools is none }} {{ tools is not none }} {{ nope is defined }} {{ messages is iterable }} {{ 3 is number }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ nope is undefined }}",
     "False True True False True False True True True True True"},
    {"Ternary",
     "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}] {{ nope if nope is defined else 'fallback' }}",
     "a b [] fallback"},
    {"SubscriptsAndSlices",
     "{{ messages[1:]|map(attribute='role')|join(',') }} {{ messages[::-1]|map(attribute='role')|join(',') }} {{ messages[-1].content[2].text }} {{ messages[0]['content'] }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::-2] }} [{{ messages[10] }}]",
     "user,assistant,user user,assistant,user,system part2 Sys bcd fdb []"},
    {"AttributeAndItemAccess",
     "{{ messages[2].tool_calls[0].function.name }} {{ messages[2]['tool_calls'][0]['function']['arguments']['b'] }} [{{ messages[1].missing }}]",
     "f x []"},
    {"ContentParts",
     "{% for p in messages[3].content %}{% if p.type == 'text' %}{{ p.text }}{% else %}<{{ p.type }}>{% endif %}{% endfor %}",
     "part1<image>part2"},
    {"StringFilters",
     "{{ '  pad '|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'hello big-world(x'|title }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}",
     "pad|ABC|abc|Hello world|Hello Big-World(X|a+b+c|bba"},
    {"ListFilters",
     "{{ [3, 1, 2]|length }} {{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ [3, 1, 2]|sort|list }} {{ [3, 1, 2]|join('-') }} {{ 'abc'|list }} {{ [1, 2, 2]|unique|list }} {{ [1, 2]|reverse|list }} {{ [1, 2, 3]|sum }}",
     "3 3 2 [1, 2, 3] 3-1-2 ['a', 'b', 'c'] [1, 2] [2, 1] 6"},
    {"SelectRejectMap",
     "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }} {{ messages|selectattr('tool_calls', 'defined')|map(attribute='role')|first }} {{ [1, 2, 3, 4]|select('even')|list }} {{ ['a', 'B']|map('upper')|list }}",
     "2 system,assistant assistant [2, 4] ['A', 'B']"},
    {"DictFiltersAndMethods",
     "{{ messages[2].tool_calls[0].function.arguments|items|list|length }} {% for k, v in messages[2].tool_calls[0].function.arguments.items() %}{{ k }}={{ v }};{% endfor %} {{ messages[1].get('tool_calls') is none }} {{ messages[1].get('x', 'dflt') }} {{ messages[1].keys()|list }} {{ messages[1].values()|list }}",
     "2 a=1;b=x; True dflt ['role', 'content'] ['user', 'Hi']"},
    {"DefaultFilter",
     "{{ nope|default('d') }} [{{ ''|default('d') }}] {{ ''|default('d', true) }} {{ none|default('d') }} {{ messages[0].nope|default('z') }}",
     "d [] d None z"},
    {"ConversionFilters",
     "{{ '3'|int }} {{ 'x'|int }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|string ~ '!' }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3|round }} {{ -3|abs }} {{ '<b>&'|escape }} {{ 'x'|safe }}",
     "3 0 3 2.5 3! 2.57 2.0 3 3 &lt;b&gt;&amp; x"},
    {"StringMethods",
     "{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('a') }} {{ 'abc'.endswith('bc') }} {{ '  a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'hello wORLD'.title() }} {{ '{} and {}'.format(1, 'x') }} {{ '%s=%d' % ('n', 3) }}",
     "x|a|a|a|True True ['a', 'b', 'c'] ['a', 'b', '', 'c'] ABab Hello World 1 and x n=3"},
    {"ToJson",
     "{{ messages[2].tool_calls[0]|tojson }} {{ {'s': 'é\"\\n\\u0001', 'f': 1.5, 'n': none, 't': true, 'e': [], 'o': {}}|tojson }}",
     "{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": \"x\"}}} {\"s\": \"é\\\"\\n\\u0001\", \"f\": 1.5, \"n\": null, \"t\": true, \"e\": [], \"o\": {}}"},
    {"ToJsonIndent",
     "{{ {'a': [1, 2], 'b': {}, 'c': [], 'd': {'e': 'f'}}|tojson(indent=2) }}",
     "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": [],\n  \"d\": {\n    \"e\": \"f\"\n  }\n}"},
    {"PrintsLikePython",
     "{{ none }} {{ true }} {{ false }} {{ 1.0 }} {{ 1e-5 }} {{ 1e16 }} {{ [1, 'a', none, true, {'k': 1.5}] }} {{ \"it's\" }} {{ [\"it's\"] }}",
     "None True False 1.0 1e-05 1e+16 [1, 'a', None, True, {'k': 1.5}] it's [\"it's\"]"},
    {"UndefinedIsFalsyAndEmpty",
     "[{{ nope }}]{% if not nope %} falsy{% endif %} {{ nope|length }} [{{ nope|trim }}] {% for x in nope %}x{% endfor %}{{ nope ~ 'cat' }}",
     "[] falsy 0 [] cat"},
    {"RangeAndGlobals",
     "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %A') }} {{ dict(a=1)|tojson }}",
     "[0, 1, 2] [1, 4, 7] [5, 3, 1] 26 Jul 2024 2024-07-26 Friday {\"a\": 1}"},
    {"RawBlock",
     "{% raw %}{{ not parsed }}{% endraw %} after",
     "{{ not parsed }} after"},
    {"FilterBlock",
     "{% filter upper %}hello {{ 'x' }}{% endfilter %}",
     "HELLO X"},
    {"NestedLoops",
     "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "11x 21y 1|12x 22y 2|"},
    {"UnicodeIsCodePoints",
     "{{ 'héllo'|length }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ '\\u00a0x\\u3000'|trim }}|{{ 'é✓😀'|tojson }}",
     "5 é olléh x|\"é✓😀\""},
};

class Feature : public ::testing::TestWithParam<feature_case> {};

TEST_P(Feature, RendersAsJinja2) {
  EXPECT_EQ(actorserve::testing::render_ok(GetParam().source, kContext), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(ChatTemplate, Feature, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<feature_case>& info) { return std::string(info.param.name); });

TEST(Feature, ParseOnceRenderMany) {
  auto tpl = actorserve::protocol::chat_template::parse("{{ messages|length }}:{{ messages[-1].content }}");
  ASSERT_TRUE(tpl.ok());
  auto one = tpl->render(actorserve::testing::parse_json(R"({"messages": [{"content": "a"}]})"));
  auto two = tpl->render(actorserve::testing::parse_json(R"({"messages": [{"content": "a"}, {"content": "b"}]})"));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(*one, "1:a");
  EXPECT_EQ(*two, "2:b");
}

TEST(Feature, CrLfNewlinesAndTrailingNewlineFollowJinja) {
  // keep_trailing_newline=False drops one final newline; "\r\n" becomes "\n".
  EXPECT_EQ(actorserve::testing::render_ok("a\r\nb\n"), "a\nb");
  EXPECT_EQ(actorserve::testing::render_ok("a\n\n"), "a\n");
}

}  // namespace

TEST(Globals, StrftimeNowIsTodayInUtcUnlessFixed) {
  auto tpl = actorserve::protocol::chat_template::parse("{{ strftime_now('%Y-%m-%d') }}");
  ASSERT_TRUE(tpl.ok());
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm t{};
    gmtime_r(&now, &t);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &t);
    return std::string(buf);
  };
  const std::string before = today();
  auto out = tpl->render({});
  const std::string after = today();  // a render across midnight UTC may show either day
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(*out == before || *out == after) << *out;
  actorserve::protocol::chat_template_limits fixed;
  fixed.fixed_time = 0;
  EXPECT_EQ(*tpl->render({}, fixed), "1970-01-01");
}
