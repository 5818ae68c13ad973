/// Templates written in the style of the popular model families (Llama 2, Llama 3.1 with tools,
/// Mistral v0.3 with tools, Qwen2.5 with tools, Gemma 2, Phi-3, Zephyr, DeepSeek Coder), each
/// exercising the constructs that family's real template relies on. Expected texts are written
/// out by hand (and agree with Python jinja2 3.1 in transformers' environment).
#include <gtest/gtest.h>

#include "render_helpers.hpp"

using actorserve::testing::apply;

namespace {

const char* kSystemUserAssistantUser = R"([
  {"role": "system", "content": "You are terse."},
  {"role": "user", "content": "Hi there "},
  {"role": "assistant", "content": " Hello!"},
  {"role": "user", "content": "Weather in Paris?"}])";
const char* kTwoUsers = R"([{"role": "user", "content": "Hi there "}, {"role": "user", "content": "Weather in Paris?"}])";
// Llama 2: system prompt merged into the first user turn, raise on bad alternation.
const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}"
    "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

TEST(FamilyTemplates, Llama2MergesSystemPromptIntoFirstTurn) {
  auto out = apply(kLlama2, kSystemUserAssistantUser);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Weather in Paris? [/INST]");
}

TEST(FamilyTemplates, Llama2RaisesOnTwoUserTurns) {
  auto out = apply(kLlama2, kTwoUsers);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.err().message, "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(out.err().code, actorserve::error_code::invalid_argument);
}

// Zephyr: one statement per line; trim_blocks + lstrip_blocks decide every newline.
const char* kZephyr = R"({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})";

TEST(FamilyTemplates, ZephyrNewlinesFollowTrimAndLstripBlocks) {
  auto out = apply(kZephyr, kSystemUserAssistantUser);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<|system|>\nYou are terse.</s>\n<|user|>\nHi there </s>\n<|assistant|>\n Hello!</s>\n"
            "<|user|>\nWeather in Paris?</s>\n<|assistant|>\n");
  auto no_prompt = apply(kZephyr, kTwoUsers, "null", false);
  ASSERT_TRUE(no_prompt.ok());
  EXPECT_EQ(*no_prompt, "<|user|>\nHi there </s>\n<|user|>\nWeather in Paris?</s>\n");
}

// Gemma 2: no system role, assistant renamed to model, content | trim.
const char* kGemma2 =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = "
    "'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

TEST(FamilyTemplates, Gemma2RenamesAssistantAndRejectsSystem) {
  auto out = apply(kGemma2, R"([{"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Hello\n"},
                               {"role": "user", "content": "Bye"}])");
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  auto sys = apply(kGemma2, kSystemUserAssistantUser);
  ASSERT_FALSE(sys.ok());
  EXPECT_EQ(sys.err().message, "System role not supported");
}

const char* kPhi3 =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|system|>' + '\n' + message['content'] + "
    "'<|end|>' + '\n'}}{% elif (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + "
    "'<|assistant|>' + '\n'}}{% elif message['role'] == 'assistant' %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}";

TEST(FamilyTemplates, Phi3) {
  auto out = apply(kPhi3, kSystemUserAssistantUser);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><|system|>\nYou are terse.<|end|>\n<|user|>\nHi there <|end|>\n<|assistant|>\n Hello!<|end|>\n"
            "<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n");
}

// DeepSeek Coder: namespace() flag set inside a loop, `{%- -%}` on indented lines.
const char* kDeepSeek = R"({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(found=false) %}{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {%- set ns.found = true -%}
    {%- endif -%}
{%- endfor -%}
{{ bos_token }}{%- if not ns.found -%}
{{ 'You are a coding assistant.\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}
{{ message['content'] }}
    {%- else %}
        {%- if message['role'] == 'user' %}
{{ '### Instruction:\n' + message['content'] + '\n' }}
        {%- else %}
{{ '### Response:\n' + message['content'] + '\n<|EOT|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}
{{ '### Response:' }}
{% endif %})";

TEST(FamilyTemplates, DeepSeekNamespaceFlagAndWhitespaceControl) {
  auto with_system = apply(kDeepSeek, kSystemUserAssistantUser);
  ASSERT_TRUE(with_system.ok()) << with_system.err().message;
  EXPECT_EQ(*with_system,
            "<s>You are terse.### Instruction:\nHi there \n### Response:\n Hello!\n<|EOT|>\n### Instruction:\nWeather in "
            "Paris?\n### Response:\n");
  auto without = apply(kDeepSeek, kTwoUsers);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without,
            "<s>You are a coding assistant.\n### Instruction:\nHi there \n### Instruction:\nWeather in Paris?\n### Response:\n");
}

}  // namespace
