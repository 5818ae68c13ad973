/// The public input value and the transformers-style entry point.
#include <gtest/gtest.h>

#include "render_helpers.hpp"

using actorserve::protocol::apply_chat_template;
using actorserve::protocol::chat_template;
using actorserve::protocol::chat_value;

namespace {

TEST(ChatValue, ObjectsKeepInsertionOrderAndReplaceInPlace) {
  chat_value v = chat_value::make_object({{"b", 1}, {"a", "x"}});
  v = v.with("b", 2).with("c", nullptr);
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.as_object().size(), 3u);
  EXPECT_EQ(v.as_object()[0].first, "b");
  EXPECT_EQ(v.find("b")->as_int(), 2);
  EXPECT_EQ(v.find("a")->as_string(), "x");
  EXPECT_TRUE(v.find("c")->is_null());
  EXPECT_EQ(v.find("zzz"), nullptr);
}

TEST(ChatValue, RendersEveryKind) {
  auto tpl = chat_template::parse("{{ v|tojson }} {{ v.i + 1 }} {{ v.d * 2 }} {{ v.l|length }}");
  ASSERT_TRUE(tpl.ok());
  chat_value v = chat_value::make_object(
      {{"n", nullptr}, {"b", true}, {"i", 41}, {"d", 0.25}, {"s", "é"}, {"l", chat_value::make_array({1, "two"})}});
  auto out = tpl->render(chat_value::make_object({{"v", v}}));
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, R"({"n": null, "b": true, "i": 41, "d": 0.25, "s": "é", "l": [1, "two"]} 42 0.5 2)");
}

TEST(ApplyChatTemplate, ConvenienceLeavesEmptyTokensUndefined) {
  auto tpl = chat_template::parse(
      "{% if bos_token is defined %}[{{ bos_token }}]{% endif %}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}>{% endif %}{{ eos_token is defined }}{{ tools is none }}");
  ASSERT_TRUE(tpl.ok());
  auto with_bos = apply_chat_template(*tpl, {chat_value::message("user", "hi")}, true, "<s>", "</s>");
  ASSERT_TRUE(with_bos.ok());
  EXPECT_EQ(*with_bos, "[<s>]user:hi>TrueTrue");
  auto without = apply_chat_template(*tpl, {chat_value::message("user", "hi")}, false, "", "");
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, "user:hiFalseTrue");
}

TEST(ApplyChatTemplate, ExtraVariablesAndGenerationTag) {
  auto tpl = chat_template::parse(
      "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}"
      "{{ m.content }}{% endif %}{% endfor %}{% if enable_thinking is defined and not enable_thinking %}<no_think>{% endif %}");
  ASSERT_TRUE(tpl.ok()) << tpl.err().message;
  actorserve::protocol::chat_template_inputs in;
  in.messages = {chat_value::message("user", "q "), chat_value::message("assistant", "a")};
  in.extra = chat_value::make_object({{"enable_thinking", false}});
  auto out = apply_chat_template(*tpl, in);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, "q a<no_think>");
}

}  // namespace
