// The chat API's tool calling and reasoning through the real server over loopback: tools reach
// each family's template, a scripted engine's output comes back as tool calls (whole and
// streamed as OpenAI streams them) or reasoning_content, and tools without the flag are refused.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "fake_engine.hpp"
#include "http_client.hpp"
#include "protocol/openai/parse.hpp"
#include "scratch_dir.hpp"
#include "server/prompt_builder.hpp"
#include "server/serve.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;

std::string tools_template(const std::string& name) { return test_data_dir() + "/chat_templates/tools/" + name; }

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

/// A conversation after one tool round: the assistant's call (arguments as a JSON string, as
/// clients send them) and the tool's answer.
std::string conversation_request() {
  return std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123def", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "abc123def", "content": "21 C"}], "tools": )") + kTools + "}";
}

std::string render(const std::string& template_file) {
  auto tok = protocol::tokenizer::from_model_dir(model_dir("llama-tiny"));
  EXPECT_TRUE(tok.ok());
  auto builder = server::prompt_builder::create(*tok, template_file);
  EXPECT_TRUE(builder.ok()) << builder.err().message;
  auto req = protocol::openai::parse_chat_request(conversation_request());
  EXPECT_TRUE(req.ok()) << req.err().message;
  auto text = (*builder)->render_chat(req->messages, true, {req->tools, {}, {}});
  EXPECT_TRUE(text.ok()) << text.err().message;
  return text.ok() ? *text : "";
}

TEST(ChatToolsPrompt, Qwen25RendersToolsCallsAndResponses) {
  const std::string text = render(tools_template("qwen2.5-instruct.jinja"));
  EXPECT_NE(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << text;
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos) << text;
  EXPECT_NE(text.find("<tool_response>\n21 C\n</tool_response>"), std::string::npos) << text;
}

TEST(ChatToolsPrompt, Llama31RendersParametersAndIpythonTurn) {
  const std::string text = render(tools_template("llama-3.1-instruct.jinja"));
  EXPECT_NE(text.find("Environment: ipython\n"), std::string::npos) << text;
  EXPECT_NE(text.find("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"), std::string::npos)
      << text;
  EXPECT_NE(text.find("<|start_header_id|>ipython<|end_header_id|>\n\n21 C<|eot_id|>"), std::string::npos) << text;
}

TEST(ChatToolsPrompt, MistralRendersToolCallsWithTheirIds) {
  const std::string text = render(tools_template("mistral-7b-instruct-v0.3.jinja"));
  EXPECT_NE(text.find("[AVAILABLE_TOOLS] [{\"type\": \"function\""), std::string::npos) << text;
  EXPECT_NE(text.find("[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[TOOL_RESULTS] {\"content\": 21 C, \"call_id\": \"abc123def\"}[/TOOL_RESULTS]"), std::string::npos)
      << text;
}

TEST(ChatToolsPrompt, ToolUseNamedTemplateIsChosenWhenToolsAreGiven) {
  namespace fs = std::filesystem;
  const scratch_dir dir("chat_tools");
  fs::copy_file(model_dir("llama-tiny") + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [
    {"name": "default", "template": "D{{ messages|length }}"},
    {"name": "tool_use", "template": "T{{ tools|length }} {{ enable_thinking }}"}]})";
  auto tok = protocol::tokenizer::from_model_dir(dir.path().string());
  ASSERT_TRUE(tok.ok()) << tok.err().message;
  auto builder = server::prompt_builder::create(*tok, "");
  ASSERT_TRUE(builder.ok()) << builder.err().message;
  auto req = protocol::openai::parse_chat_request(
      std::string(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": false},
      "tools": )") + kTools + "}");
  ASSERT_TRUE(req.ok()) << req.err().message;
  EXPECT_EQ(*(*builder)->render_chat(req->messages, true), "D1");
  EXPECT_EQ(*(*builder)->render_chat(req->messages, true, {req->tools, req->chat_template_kwargs, {}}), "T1 False");
}

class ChatTools : public ::testing::Test {
 protected:
  /// `script`: the engine's output pieces; set before the server's threads start (so the
  /// engine threads read it without a race).
  void start(chat_options chat, std::vector<std::string> script = {},
             const std::string& template_file = tools_template("qwen2.5-instruct.jinja"),
             const std::string& model = "", generation_config_source defaults = generation_config_source::auto_detect) {
    server_.reset();
    auto tok = protocol::tokenizer::from_model_dir(model_dir("llama-tiny"));
    ASSERT_TRUE(tok.ok()) << tok.err().message;
    engine_ = std::make_unique<fake_engine>(std::move(*tok));
    engine_->context_length = 4096;
    engine_->scripted_text = std::move(script);
    engine_config cfg;
    cfg.server.port = 0;
    cfg.model.chat_template_file = template_file;
    cfg.model.model_dir = model;
    cfg.model.generation_config = defaults;
    cfg.chat = chat;
    auto srv = server::http_server::start(*engine_, cfg);
    ASSERT_TRUE(srv.ok()) << srv.err().message;
    server_ = std::move(*srv);
  }
  void TearDown() override {
    if (engine_) engine_->shutdown(0ms);
    server_.reset();
  }
  http_response chat(const std::string& extra) {
    return http_call(server_->port(), "POST", "/v1/chat/completions",
                     std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )") + kTools +
                         extra + "}");
  }
  static chat_options hermes() {
    chat_options c;
    c.enable_auto_tool_choice = true;
    c.tool_call_parser = tool_parser_kind::hermes;
    return c;
  }

  std::unique_ptr<fake_engine> engine_;
  std::unique_ptr<server::http_server> server_;
  simdjson::dom::parser json_;
};

const std::vector<std::string> kCallOutput = {
    "Let me", " check.", "<tool", "_call>\n{\"name\": \"get_", "weather\", \"argu", "ments\": {\"city\": ",
    "\"Par", "is\"}}\n</tool_call>"};

TEST_F(ChatTools, WholeResponseCarriesToolCallsAndFinishReason) {
  start(hermes(), kCallOutput);
  auto r = chat("");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(r.body).get(doc)) << r.body;
  auto choice = doc["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "tool_calls");
  EXPECT_EQ(std::string_view(choice["message"]["content"]), "Let me check.");
  auto call = choice["message"]["tool_calls"].at(0);
  EXPECT_EQ(std::string_view(call["type"]), "function");
  EXPECT_TRUE(std::string_view(call["id"]).starts_with("call_"));
  EXPECT_EQ(std::string_view(call["function"]["name"]), "get_weather");
  EXPECT_EQ(std::string_view(call["function"]["arguments"]), "{\"city\": \"Paris\"}");
}

TEST_F(ChatTools, StreamSendsIdAndNameFirstThenArgumentsInPieces) {
  start(hermes(), kCallOutput);
  auto r = chat(R"(, "stream": true)");
  ASSERT_EQ(r.status, 200) << r.body;
  std::string content, arguments, finish;
  std::vector<std::map<std::string, std::string>> calls;
  for (const auto& e : sse_payloads(r.body)) {
    if (e == "[DONE]") break;
    simdjson::dom::element doc;
    ASSERT_FALSE(json_.parse(e).get(doc)) << e;
    auto choice = doc["choices"].at(0);
    if (choice["finish_reason"].is_string()) finish = std::string(std::string_view(choice["finish_reason"]));
    auto delta = choice["delta"];
    if (std::string_view c; !delta["content"].get(c)) content += c;
    simdjson::dom::array tc;
    if (delta["tool_calls"].get(tc)) continue;
    for (auto piece : tc) {
      std::map<std::string, std::string> m;
      EXPECT_EQ(int64_t(piece["index"]), 0);
      if (std::string_view id; !piece["id"].get(id)) m["id"] = id;
      if (std::string_view name; !piece["function"]["name"].get(name)) m["name"] = name;
      m["arguments"] = std::string_view(piece["function"]["arguments"]);
      arguments += m["arguments"];
      calls.push_back(m);
    }
  }
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_GE(calls.size(), 3u) << "the arguments should stream in several pieces";
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_FALSE(calls[0]["id"].empty());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_EQ(calls[i].count("name"), 0u);
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
}

TEST_F(ChatTools, ToolChoiceNoneLeavesTheOutputAsText) {
  start(hermes(), kCallOutput);
  auto r = chat(R"(, "tool_choice": "none")");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(r.body).get(doc));
  auto choice = doc["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "stop");
  EXPECT_NE(std::string_view(choice["message"]["content"]).find("<tool_call>"), std::string_view::npos);
  EXPECT_TRUE(choice["message"]["tool_calls"].error());
}

TEST_F(ChatTools, ToolsWithoutTheFlagAre400NamingTools) {
  start({});
  auto r = chat("");
  ASSERT_EQ(r.status, 400) << r.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(r.body).get(doc));
  EXPECT_EQ(std::string_view(doc["error"]["param"]), "tools");
  EXPECT_NE(std::string_view(doc["error"]["message"]).find("--enable-auto-tool-choice"), std::string_view::npos);
}

TEST_F(ChatTools, ReasoningParserSplitsThinkingWholeAndStreamed) {
  chat_options c;
  c.reasoning_parser = reasoning_parser_kind::qwen3;
  start(c, {"<thi", "nk>Paris is", " in France.</th", "ink>\n\nIt is sunny."});
  auto whole = http_call(server_->port(), "POST", "/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "Weather?"}]})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(whole.body).get(doc));
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["message"]["reasoning_content"]), "Paris is in France.");
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["message"]["content"]), "\n\nIt is sunny.");

  auto stream = http_call(server_->port(), "POST", "/v1/chat/completions",
                          R"({"messages": [{"role": "user", "content": "Weather?"}], "stream": true})");
  std::string reasoning, content;
  for (const auto& e : sse_payloads(stream.body)) {
    if (e == "[DONE]") break;
    simdjson::dom::element chunk;
    ASSERT_FALSE(json_.parse(e).get(chunk));
    auto delta = chunk["choices"].at(0)["delta"];
    if (std::string_view t; !delta["reasoning_content"].get(t)) reasoning += t;
    if (std::string_view t; !delta["content"].get(t)) content += t;
  }
  EXPECT_EQ(reasoning, "Paris is in France.");
  EXPECT_EQ(content, "\n\nIt is sunny.");
}

TEST_F(ChatTools, StreamedChoicesKeepTheirIndices) {
  start({});
  auto r = http_call(server_->port(), "POST", "/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "x"}], "n": 3, "max_tokens": 4, "stream": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::map<int64_t, std::string> text, finish;
  for (const auto& e : sse_payloads(r.body)) {
    if (e == "[DONE]") break;
    simdjson::dom::element chunk;
    ASSERT_FALSE(json_.parse(e).get(chunk));
    auto choice = chunk["choices"].at(0);
    const int64_t index = int64_t(choice["index"]);
    if (std::string_view t; !choice["delta"]["content"].get(t)) text[index] += t;
    if (choice["finish_reason"].is_string()) finish[index] = std::string_view(choice["finish_reason"]);
  }
  ASSERT_EQ(text.size(), 3u);
  for (int64_t c = 0; c < 3; ++c) {
    std::string expected;
    for (int s = 0; s < 4; ++s) {
      const int32_t id[] = {fake_engine::token_at(s, static_cast<int>(c))};
      expected += engine_->tokenizer().decode(id, false);
    }
    EXPECT_EQ(text[c], expected) << "choice " << c;
    EXPECT_EQ(finish[c], "length") << "choice " << c;
  }
}

TEST_F(ChatTools, GenerationConfigDefaultsFillUnsetFieldsUnlessVllm) {
  namespace fs = std::filesystem;
  const scratch_dir dir("gen_defaults");
  for (const char* f : {"config.json", "tokenizer.json"})
    fs::copy_file(model_dir("llama-tiny") + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "generation_config.json")
      << R"({"eos_token_id": 1, "temperature": 0.25, "top_k": 7, "top_p": 0.8, "max_new_tokens": 5})";
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0.5})";
  for (auto source : {generation_config_source::auto_detect, generation_config_source::vllm}) {
    start({}, {}, tools_template("qwen2.5-instruct.jinja"), dir.path().string(), source);
    ASSERT_EQ(http_call(server_->port(), "POST", "/v1/chat/completions", body).status, 200);
    const sampling_params p = engine_->last_params();
    const bool file = source == generation_config_source::auto_detect;
    EXPECT_EQ(p.temperature, file ? 0.25f : 1.0f);
    EXPECT_EQ(p.top_k, file ? 7 : -1);
    EXPECT_EQ(p.top_p, 0.5f);  // the request's own value wins
    if (file) EXPECT_EQ(p.max_tokens, 5);
    else EXPECT_GT(p.max_tokens, 5);  // the room left in the context
    engine_->shutdown(0ms);
  }
}

}  // namespace
}  // namespace actorserve::testing
