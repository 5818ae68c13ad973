// The server against the real engine (actors + CPU executor) on llama-tiny, over real sockets.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine_server.hpp"
#include "http_client.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "server/context.hpp"
#include "server/serve.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;

std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }

std::vector<int64_t> ints(simdjson::dom::element e) {
  std::vector<int64_t> out;
  for (auto x : simdjson::dom::array(e)) out.push_back(int64_t(x));
  return out;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

class ServerEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_config cfg;
    cfg.model.model_dir = model_dir("llama-tiny");
    cfg.model.served_model_name = "llama-tiny";
    cfg.model.chat_template_file = test_data_dir() + "/chat_templates/templates/meta-llama-3-8b-instruct.jinja";
    cfg.executor.device = device_kind::cpu;
    cfg.executor.cpu_threads = 1;
    cfg.cache.num_gpu_blocks_override = 512;
    cfg.server.port = 0;
    start_engine_server(cfg, engine_, server_);
  }
  static void TearDownTestSuite() { stop_engine_server(engine_, server_); }
  uint16_t port() const { return server_->port(); }

  /// The first reference case: prompt ids and the HF greedy continuation.
  static void reference(std::vector<int64_t>& prompt, std::vector<int64_t>& greedy, size_t& trusted) {
    static simdjson::dom::parser p;
    simdjson::dom::element doc;
    ASSERT_FALSE(p.load(model_dir("llama-tiny") + "/reference.json").get(doc));
    auto c = doc["cases"].at(1);  // the 7-token prompt
    prompt = ints(c["prompt_ids"]);
    greedy = ints(c["greedy_ids"]);
    trusted = 0;
    for (auto m : simdjson::dom::array(c["greedy_top2_margins"])) {
      if (double(m) < 1e-3) break;
      ++trusted;
    }
  }

  static actors::engine* engine_;
  static server::http_server* server_;
  simdjson::dom::parser json_;
};
actors::engine* ServerEngine::engine_ = nullptr;
server::http_server* ServerEngine::server_ = nullptr;

TEST_F(ServerEngine, GreedyCompletionMatchesTheReference) {
  std::vector<int64_t> prompt, greedy;
  size_t trusted = 0;
  reference(prompt, greedy, trusted);
  ASSERT_GT(trusted, 4u);
  const int max_tokens = static_cast<int>(std::min<size_t>(trusted, 12));
  const std::string body = R"({"prompt": [)" + join(prompt) + R"(], "max_tokens": )" + std::to_string(max_tokens) +
                           R"(, "temperature": 0, "ignore_eos": true, "return_token_ids": true})";
  auto r = http_call(port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(r.body).get(doc));
  auto ids = ints(doc["choices"].at(0)["token_ids"]);
  ASSERT_EQ(ids.size(), size_t(max_tokens));
  EXPECT_EQ(ids, std::vector<int64_t>(greedy.begin(), greedy.begin() + max_tokens));
  EXPECT_EQ(str(doc["choices"].at(0)["finish_reason"]), "length");
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), int64_t(prompt.size()));
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), max_tokens);
  const std::string text = str(doc["choices"].at(0)["text"]);

  // The same request streamed: the same tokens and text, chunk by chunk.
  auto s = http_call(port(), "POST", "/v1/completions",
                     body.substr(0, body.size() - 1) + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(s.status, 200);
  auto events = sse_payloads(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  std::vector<int64_t> streamed_ids;
  simdjson::dom::parser p2;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    simdjson::dom::element e;
    ASSERT_FALSE(p2.parse(events[i]).get(e)) << events[i];
    streamed += str(e["choices"].at(0)["text"]);
    for (auto id : ints(e["choices"].at(0)["token_ids"])) streamed_ids.push_back(id);
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(streamed_ids, ids);
  simdjson::dom::element usage;
  ASSERT_FALSE(p2.parse(events[events.size() - 2]).get(usage));
  EXPECT_EQ(int64_t(usage["usage"]["completion_tokens"]), max_tokens);
}

TEST_F(ServerEngine, ChatWithFixtureTemplate) {
  const std::string messages = R"([{"role": "user", "content": "Hello there"}])";
  auto tok = http_call(port(), "POST", "/tokenize", R"({"messages": )" + messages + "}");
  ASSERT_EQ(tok.status, 200) << tok.body;
  simdjson::dom::element t;
  ASSERT_FALSE(json_.parse(tok.body).get(t));
  const int64_t prompt_tokens = int64_t(t["count"]);
  EXPECT_EQ(prompt_tokens, int64_t(engine_->tokenizer().encode(
                "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n", false).size()));

  simdjson::dom::parser p2;
  auto r = http_call(port(), "POST", "/v1/chat/completions",
                     R"({"messages": )" + messages + R"(, "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 2, "n": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element doc;
  ASSERT_FALSE(p2.parse(r.body).get(doc));
  EXPECT_EQ(str(doc["object"]), "chat.completion");
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), prompt_tokens);
  simdjson::dom::array choices = doc["choices"];
  ASSERT_EQ(choices.size(), 2u);
  // Greedy: both samples are the same text; logprobs list one entry per generated token.
  EXPECT_EQ(str(choices.at(0)["message"]["content"]), str(choices.at(1)["message"]["content"]));
  EXPECT_EQ(str(choices.at(0)["message"]["role"]), "assistant");
  simdjson::dom::array content = choices.at(0)["logprobs"]["content"];
  const int64_t completion = int64_t(doc["usage"]["completion_tokens"]);
  EXPECT_EQ(int64_t(content.size()) * 2, completion);
  for (auto entry : content) {
    EXPECT_LE(double(entry["logprob"]), 0.0);
    EXPECT_EQ(simdjson::dom::array(entry["top_logprobs"]).size(), 2u);
  }
}

TEST_F(ServerEngine, DisconnectMidStreamCancelsInTheEngine) {
  const auto before = engine_->stats().requests_cancelled;
  {
    client_socket s(port());
    s.send_all(make_request("POST", "/v1/completions",
                            R"({"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true, "stream": true})"));
    std::string buf;
    while (buf.find("data: {") == std::string::npos) ASSERT_TRUE(s.read_some(buf));
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline &&
         (engine_->stats().num_running != 0 || server_->context().num_active_jobs.load() != 0))
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine_->stats().num_running, 0);
  EXPECT_EQ(server_->context().num_active_jobs.load(), 0);
  EXPECT_GT(engine_->stats().requests_cancelled, before);
  auto m = http_call(port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("actorserve:num_requests_running{model_name=\"llama-tiny\"} 0\n"), std::string::npos);
}

TEST_F(ServerEngine, StopStringEndsTheChoiceWithoutTheStopText) {
  std::vector<int64_t> prompt, greedy;
  size_t trusted = 0;
  reference(prompt, greedy, trusted);
  auto r = http_call(port(), "POST", "/v1/completions",
                     R"({"prompt": [)" + join(prompt) + R"(], "max_tokens": 8, "temperature": 0, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200);
  simdjson::dom::element doc;
  ASSERT_FALSE(json_.parse(r.body).get(doc));
  const std::string full = str(doc["choices"].at(0)["text"]);
  ASSERT_GE(full.size(), 4u);
  const std::string stop = full.substr(full.size() / 2, 2);
  const size_t cut = full.find(stop);
  simdjson::dom::parser p2;
  std::string stop_json;
  std::string esc = "\"";
  for (char c : stop) {
    if (c == '"' || c == '\\') esc += '\\';
    esc += c;
  }
  esc += '"';
  auto s = http_call(port(), "POST", "/v1/completions",
                     R"({"prompt": [)" + join(prompt) + R"(], "max_tokens": 8, "temperature": 0, "ignore_eos": true, "stop": [)" + esc + "]}");
  ASSERT_EQ(s.status, 200) << s.body;
  simdjson::dom::element d2;
  ASSERT_FALSE(p2.parse(s.body).get(d2));
  EXPECT_EQ(str(d2["choices"].at(0)["text"]), full.substr(0, cut));
  EXPECT_EQ(str(d2["choices"].at(0)["finish_reason"]), "stop");
}

/// A sample's value on a /metrics page: `series` with its labels, e.g.
/// `actorserve:num_steps_total{model_name="llama-tiny"}`; NaN when the page lacks it.
double sample(const std::string& page, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t at = page.find(key);
  if (at == std::string::npos) return std::nan("");
  const size_t from = at + key.size();
  return std::stod(page.substr(from, page.find('\n', from) - from));
}

TEST_F(ServerEngine, SchedulerTimesAndIterationTokensReachMetrics) {
  const auto idle_by = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < idle_by &&
         (engine_->stats().num_running + engine_->stats().num_waiting != 0 || server_->context().num_active_jobs.load() != 0))
    std::this_thread::sleep_for(10ms);
  const std::string model = R"(model_name="llama-tiny")";
  auto value = [&](const std::string& page, const std::string& name, const std::string& labels = "") {
    return sample(page, name + "{" + model + labels + "}");
  };
  const std::string before = http_call(port(), "GET", "/metrics").body;
  // A 200-token prompt no other test sends (no prefix hits), computed in one step, then three
  // single-token decode steps: 203 tokens computed in four steps.
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 200; ++i) prompt.push_back(700 + (i * 37) % 300);
  auto r = http_call(port(), "POST", "/v1/completions",
                     R"({"prompt": [)" + join(prompt) + R"(], "max_tokens": 4, "temperature": 0, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string after = http_call(port(), "GET", "/metrics").body;
  auto delta = [&](const std::string& name, const std::string& labels = "") {
    return value(after, name, labels) - value(before, name, labels);
  };

  for (const char* h : {"actorserve:request_queue_time_seconds", "actorserve:request_prefill_time_seconds",
                        "actorserve:request_decode_time_seconds", "actorserve:request_inference_time_seconds",
                        "actorserve:request_prompt_tokens", "actorserve:request_generation_tokens",
                        "actorserve:request_params_n", "actorserve:request_params_max_tokens"})
    EXPECT_EQ(delta(std::string(h) + "_count"), 1) << h;
  const double queue = delta("actorserve:request_queue_time_seconds_sum");
  const double prefill = delta("actorserve:request_prefill_time_seconds_sum");
  const double decode = delta("actorserve:request_decode_time_seconds_sum");
  const double inference = delta("actorserve:request_inference_time_seconds_sum");
  EXPECT_GE(queue, 0.0);
  EXPECT_GT(prefill, 0.0) << "a 200-token prompt takes time to compute";
  EXPECT_GT(decode, 0.0);
  EXPECT_NEAR(inference, prefill + decode, 5e-6) << "inference is prefill then decode";
  EXPECT_GE(delta("actorserve:e2e_request_latency_seconds_sum") + 1e-3, queue + inference)
      << "the server's end-to-end time covers the scheduler's";
  EXPECT_EQ(delta("actorserve:request_params_max_tokens_bucket", ",le=\"5\""), 1);
  EXPECT_EQ(delta("actorserve:request_params_max_tokens_bucket", ",le=\"2\""), 0);
  EXPECT_EQ(delta("actorserve:request_params_n_bucket", ",le=\"1\""), 1);
  EXPECT_EQ(delta("actorserve:request_generation_tokens_bucket", ",le=\"5\""), 1);

  EXPECT_EQ(delta("actorserve:iteration_tokens_total_count"), 4);
  EXPECT_EQ(delta("actorserve:iteration_tokens_total_count"), delta("actorserve:num_steps_total"));
  EXPECT_EQ(delta("actorserve:iteration_tokens_total_sum"), 203) << "the tokens computed";
  EXPECT_EQ(delta("actorserve:iteration_tokens_total_bucket", ",le=\"1\""), 3) << "three decode steps";
  EXPECT_EQ(delta("actorserve:iteration_tokens_total_bucket", ",le=\"128\""), 3);
  EXPECT_EQ(delta("actorserve:iteration_tokens_total_bucket", ",le=\"256\""), 4) << "the prefill step";
  EXPECT_EQ(value(after, "actorserve:iteration_tokens_total_sum"), double(engine_->stats().num_computed_tokens));
}

}  // namespace
}  // namespace actorserve::testing
