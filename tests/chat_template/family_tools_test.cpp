/// Tool-calling templates in the style of Qwen2.5, Llama 3.1 and Mistral v0.3: tojson (with and
/// without indent), tool_calls, selectattr/rejectattr, `for ... in d.items() if ...`, slicing a
/// string, strftime_now. Expected texts written out by hand (and checked against Python jinja2).
#include <gtest/gtest.h>

#include "render_helpers.hpp"

using actorserve::testing::apply;

namespace {

const char* kToolConversation = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "tool_calls": [{"id": "abc123def", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
  {"role": "tool", "tool_call_id": "abc123def", "content": "{\"temp\": 21}"}])";
const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

const char* kQwen25 = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)";

TEST(FamilyTools, Qwen25ToolCallsAndResponses) {
  auto out = apply(kQwen25, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n"
            R"({"type": "function", "function": {"name": "get_weather", "description": "Get the weather", )"
            R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})"
            "\n</tools><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}"
            "\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(FamilyTools, Qwen25WithoutTools) {
  auto out = apply(kQwen25, R"([{"role": "user", "content": "Hi"}])");
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

const char* kLlama31 = R"({{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- Pull out the system message #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

TEST(FamilyTools, Llama31IndentedToolJsonAndFixedDate) {
  auto out = apply(kLlama31, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nYou have access to the following functions:\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
            "        \"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
            "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n"
            "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
            "        }\n    }\n}\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", "
            "\"unit\": \"c\"}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(FamilyTools, Llama31SystemMessageIsTrimmedAndMessagesReassigned) {
  auto out = apply(kLlama31, R"([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi "}])", "null",
                   false);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

const char* kMistralV3 = R"({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{%- for message in loop_messages | rejectattr("role", "equalto", "tool") | selectattr("tool_calls", "undefined") %}
    {%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}
        {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool" %}
        {{- '[TOOL_RESULTS] {"content": ' + message.content|string + ", " }}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported!") }}
    {%- endif %}
{%- endfor %}
)";

TEST(FamilyTools, MistralV3AvailableToolsAndToolCalls) {
  auto out = apply(kMistralV3, kToolConversation, kTools);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out,
            "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the "
            "weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
            "[\"city\"]}}}][/AVAILABLE_TOOLS][INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abc123def\"}]</s>"
            "[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": \"abc123def\"}[/TOOL_RESULTS]");
}

TEST(FamilyTools, MistralV3SystemGoesToLastUserTurn) {
  auto out = apply(kMistralV3, R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there "},
      {"role": "assistant", "content": " Hello!"}, {"role": "user", "content": "Weather in Paris?"}])");
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, "<s>[INST] Hi there [/INST] Hello!</s>[INST] You are terse.\n\nWeather in Paris?[/INST]");
  auto bad = apply(kMistralV3, R"([{"role": "assistant", "content": "first"}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().message,
            "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
}

}  // namespace
