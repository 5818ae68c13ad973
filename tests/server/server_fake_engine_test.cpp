// The server against a scripted engine: routes, limits, auth, SSE framing, disconnects and slow
// clients, over real sockets on 127.0.0.1.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <thread>

#include "fake_engine.hpp"
#include "http_client.hpp"
#include "server/context.hpp"
#include "server/serve.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;

simdjson::dom::element parse_json(simdjson::dom::parser& p, const std::string& text) {
  simdjson::dom::element e;
  EXPECT_FALSE(p.parse(text).get(e)) << text;
  return e;
}

std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 3000ms) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

class ServerFake : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void start(const std::string& api_key, int64_t max_body = 1 << 20, int64_t context = 64,
             int64_t max_connections = 16384, int64_t idle_timeout_s = 60) {
    server_.reset();
    auto tok = protocol::tokenizer::from_model_dir(model_dir("llama-tiny"));
    ASSERT_TRUE(tok.ok()) << tok.err().message;
    engine_ = std::make_unique<fake_engine>(std::move(*tok));
    engine_->context_length = context;
    engine_config cfg;
    cfg.server.port = 0;
    cfg.server.api_key = api_key;
    cfg.server.max_body_bytes = max_body;
    cfg.server.max_connections = max_connections;
    cfg.server.idle_timeout_s = idle_timeout_s;
    cfg.model.served_model_name = "tiny";
    auto srv = server::http_server::start(*engine_, cfg);
    ASSERT_TRUE(srv.ok()) << srv.err().message;
    server_ = std::move(*srv);
    port_ = server_->port();
  }
  void TearDown() override {
    engine_->shutdown(0ms);
    server_.reset();
  }
  std::string expected_text(int steps, int choice) const {
    std::string out;
    for (int s = 0; s < steps; ++s) {
      const int32_t id[] = {fake_engine::token_at(s, choice)};
      out += engine_->tokenizer().decode(id, false);
    }
    return out;
  }

  std::unique_ptr<fake_engine> engine_;
  std::unique_ptr<server::http_server> server_;
  uint16_t port_ = 0;
  simdjson::dom::parser json_;
};

TEST_F(ServerFake, HealthFollowsEngineHealth) {
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
  engine_->healthy = false;
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 503);
}

TEST_F(ServerFake, ModelsListsTheServedName) {
  auto r = http_call(port_, "GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  auto doc = parse_json(json_, r.body);
  EXPECT_EQ(str(doc["data"].at(0)["id"]), "tiny");
  EXPECT_EQ(int64_t(doc["data"].at(0)["max_model_len"]), 64);
}

TEST_F(ServerFake, UnknownRouteIsAnOpenAIError404) {
  auto r = http_call(port_, "GET", "/v2/nothing");
  EXPECT_EQ(r.status, 404);
  auto doc = parse_json(json_, r.body);
  EXPECT_EQ(str(doc["error"]["type"]), "not_found_error");
}

TEST_F(ServerFake, InvalidFieldIs400NamingTheParam) {
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt": "hi", "top_p": 2})");
  EXPECT_EQ(r.status, 400);
  auto doc = parse_json(json_, r.body);
  EXPECT_EQ(str(doc["error"]["param"]), "top_p");
  EXPECT_EQ(str(doc["error"]["type"]), "invalid_request_error");
}

TEST_F(ServerFake, UnknownModelIs404) {
  auto r = http_call(port_, "POST", "/v1/completions", R"({"model": "gpt-9", "prompt": "hi"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(str(parse_json(json_, r.body)["error"]["param"]), "model");
}

TEST_F(ServerFake, PromptLongerThanContextIs400) {
  std::string ids = "[1";
  for (int i = 0; i < 70; ++i) ids += ",5";
  ids += "]";
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt": )" + ids + "}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(str(parse_json(json_, r.body)["error"]["param"]), "prompt");
  auto over = http_call(port_, "POST", "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 63})");
  EXPECT_EQ(over.status, 400);
  EXPECT_EQ(str(parse_json(json_, over.body)["error"]["param"]), "max_tokens");
}

TEST_F(ServerFake, BodyOverLimitIs413) {
  start("", 256);
  const std::string big = R"({"prompt": ")" + std::string(1000, 'a') + "\"}";
  EXPECT_EQ(http_call(port_, "POST", "/v1/completions", big).status, 413);
}

TEST_F(ServerFake, OversizedHeadersAre431) {
  auto r = http_call(port_, "GET", "/v1/models", {}, {"X-Filler: " + std::string(20000, 'h')});
  EXPECT_EQ(r.status, 431);
}

TEST_F(ServerFake, IdleConnectionsAreClosed) {
  start("", 1 << 20, 64, 16384, 1);
  client_socket s(port_);
  const auto t0 = std::chrono::steady_clock::now();
  std::string buf;
  EXPECT_FALSE(s.read_some(buf));  // EOF once the idle timeout passes
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 5000ms);
}

TEST_F(ServerFake, ConnectionsOverTheLimitAreRefused) {
  start("", 1 << 20, 64, 2);
  client_socket a(port_), b(port_);
  std::string buf;
  a.send_all(make_request("GET", "/v1/models", ""));
  EXPECT_EQ(read_response(a, buf).status, 200);
  b.send_all(make_request("GET", "/v1/models", ""));
  EXPECT_EQ(read_response(b, buf).status, 200);
  client_socket c(port_);
  c.send_all(make_request("GET", "/v1/models", ""));
  EXPECT_EQ(read_response(c, buf).status, 0);  // closed without an answer
  a.close();
  ASSERT_TRUE(eventually([&] { return server_->context().num_connections.load() == 1; }));
  EXPECT_EQ(http_call(port_, "GET", "/v1/models").status, 200);
}

TEST_F(ServerFake, ApiKeyGuardsEverythingButHealthAndMetrics) {
  start("sekrit");
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
  EXPECT_EQ(http_call(port_, "GET", "/metrics").status, 200);  // open, as in vLLM: Prometheus needs no secret
  auto denied = http_call(port_, "GET", "/v1/models");
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(str(parse_json(json_, denied.body)["error"]["type"]), "authentication_error");
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", {}, {"Authorization: Bearer wrong!"}).status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", {}, {"Authorization: Bearer sekri"}).status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", {}, {"Authorization: Bearer sekrit"}).status, 200);
  EXPECT_EQ(http_call(port_, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})",
                      {"Authorization: Bearer sekrit"}).status, 200);
}

TEST_F(ServerFake, CompletionWholeResponse) {
  auto r = http_call(port_, "POST", "/v1/completions",
                     R"({"prompt": ["Hello", "Hi there"], "max_tokens": 5, "n": 2, "return_token_ids": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto doc = parse_json(json_, r.body);
  EXPECT_EQ(str(doc["object"]), "text_completion");
  EXPECT_EQ(str(doc["model"]), "tiny");
  simdjson::dom::array choices = doc["choices"];
  ASSERT_EQ(choices.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    auto c = choices.at(i);
    EXPECT_EQ(int64_t(c["index"]), int64_t(i));
    EXPECT_EQ(str(c["text"]), expected_text(5, int(i % 2)));
    EXPECT_EQ(str(c["finish_reason"]), "length");
    EXPECT_EQ(simdjson::dom::array(c["token_ids"]).size(), 5u);
  }
  const auto hello = engine_->tokenizer().encode("Hello", true);
  EXPECT_EQ(simdjson::dom::array(choices.at(0)["prompt_token_ids"]).size(), hello.size());
  const auto hi = engine_->tokenizer().encode("Hi there", true);
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), int64_t(hello.size() + hi.size()));
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 20);
  EXPECT_EQ(int64_t(doc["usage"]["total_tokens"]), int64_t(hello.size() + hi.size()) + 20);
}

TEST_F(ServerFake, CompletionStreamWithUsage) {
  auto r = http_call(port_, "POST", "/v1/completions",
                     R"({"prompt": "Hello", "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  auto events = sse_payloads(r.body);
  ASSERT_EQ(events.size(), 6u) << r.body;  // 4 tokens, usage, [DONE]
  std::string text;
  for (size_t i = 0; i < 4; ++i) {
    auto e = parse_json(json_, events[i]);
    text += str(e["choices"].at(0)["text"]);
    EXPECT_TRUE(e["usage"].is_null());
    EXPECT_EQ(e["choices"].at(0)["finish_reason"].is_null(), i < 3);
  }
  EXPECT_EQ(text, expected_text(4, 0));
  auto usage = parse_json(json_, events[4]);
  EXPECT_EQ(simdjson::dom::array(usage["choices"]).size(), 0u);
  EXPECT_EQ(int64_t(usage["usage"]["completion_tokens"]), 4);
  EXPECT_EQ(events[5], "[DONE]");
}

TEST_F(ServerFake, KeepAliveServesSeveralRequestsOnOneConnection) {
  client_socket s(port_);
  std::string buf;
  for (int i = 0; i < 3; ++i) {
    s.send_all(make_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "stream": true})"));
    auto r = read_response(s, buf);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(sse_payloads(r.body).back(), "[DONE]");
    s.send_all(make_request("GET", "/v1/models", ""));
    EXPECT_EQ(read_response(s, buf).status, 200);
  }
}

TEST_F(ServerFake, EngineFailureMidStreamBecomesAnErrorEvent) {
  engine_->fail_mid_stream = true;
  auto whole = http_call(port_, "POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(whole.status, 500);
  EXPECT_EQ(str(parse_json(json_, whole.body)["error"]["type"]), "server_error");
}

TEST_F(ServerFake, SubmitRejectionIsMappedOnce) {
  engine_->fail_next_submit = true;
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt": "x", "stream": true})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(str(parse_json(json_, r.body)["error"]["param"]), "prompt");
}

TEST_F(ServerFake, ClientDisconnectCancelsTheRequest) {
  engine_->step = 2ms;
  for (bool stream : {true, false}) {
    const int before = engine_->num_submitted;
    const size_t cancelled_before = engine_->num_cancelled();
    client_socket s(port_);
    s.send_all(make_request("POST", "/v1/completions",
                            std::string(R"({"prompt": "x", "max_tokens": 60, "stream": )") + (stream ? "true" : "false") + "}"));
    ASSERT_TRUE(eventually([&] { return engine_->num_submitted > before; }));
    std::this_thread::sleep_for(20ms);
    s.close();
    EXPECT_TRUE(eventually([&] { return engine_->num_cancelled() > cancelled_before; }, 1000ms)) << "stream=" << stream;
  }
  EXPECT_TRUE(eventually([&] { return server_->context().num_active_jobs.load() == 0; }));
}

TEST_F(ServerFake, SlowClientIsCutAndItsRequestCancelled) {
  start("", 1 << 20, 1 << 20);
  engine_->step = std::chrono::microseconds(0);
  engine_->text_suffix = std::string(4096, 'z');
  client_socket s(port_, 4096);
  s.send_all(make_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 20000, "stream": true})"));
  EXPECT_TRUE(eventually([&] { return server_->context().stats.streams_cut.load() == 1; }, 10000ms));
  EXPECT_TRUE(eventually([&] { return engine_->num_cancelled() == 1 || engine_->num_refused_by_sink == 1; }));
  std::string buf;
  while (s.read_some(buf) && buf.find("data: [DONE]") == std::string::npos) {}
  EXPECT_NE(buf.find("did not read fast enough"), std::string::npos);
}

TEST_F(ServerFake, TokenizeAndDetokenize) {
  auto r = http_call(port_, "POST", "/tokenize", R"({"prompt": "Hello world"})");
  ASSERT_EQ(r.status, 200);
  auto doc = parse_json(json_, r.body);
  const auto ids = engine_->tokenizer().encode("Hello world", true);
  simdjson::dom::array tokens = doc["tokens"];
  ASSERT_EQ(tokens.size(), ids.size());
  EXPECT_EQ(int64_t(doc["count"]), int64_t(ids.size()));
  EXPECT_EQ(int64_t(doc["max_model_len"]), 64);
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(int64_t(tokens.at(i)), ids[i]);
    list += (i ? "," : "") + std::to_string(ids[i]);
  }
  auto d = http_call(port_, "POST", "/detokenize", R"({"tokens": [)" + list + "]}");
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(str(parse_json(json_, d.body)["prompt"]), engine_->tokenizer().decode(ids, false));
  EXPECT_EQ(http_call(port_, "POST", "/detokenize", R"({"tokens": [99999999]})").status, 400);
}

TEST_F(ServerFake, MetricsExposeEngineAndLatency) {
  http_call(port_, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 3})");
  ASSERT_TRUE(eventually([&] { return engine_->stats().num_running == 0; }));  // its thread ends after the last delta
  auto r = http_call(port_, "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  // Every series carries the served model's name, as vLLM's do (dashboards select on it).
  for (const char* name : {"actorserve:num_requests_running{model_name=\"tiny\"} 0",
                           "actorserve:num_requests_waiting{model_name=\"tiny\"} 0",
                           "actorserve:kv_blocks_used{model_name=\"tiny\"}",
                           "actorserve:prefix_cache_hit_rate{model_name=\"tiny\"}",
                           "actorserve:num_preemptions_total{model_name=\"tiny\"}",
                           "actorserve:prompt_tokens_total{model_name=\"tiny\"}",
                           "actorserve:cascade_seqs_total{model_name=\"tiny\"} 0",
                           "actorserve:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}",
                           "actorserve:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1",
                           "actorserve:time_to_first_token_seconds_count{model_name=\"tiny\"} 1",
                           "actorserve:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1",
                           "actorserve:inter_token_latency_seconds_count{model_name=\"tiny\"} 2"})
    EXPECT_NE(r.body.find(name), std::string::npos) << name;
}

TEST_F(ServerFake, DrainRefusesNewWorkAndWaitsForRunning) {
  engine_->step = 5ms;
  client_socket s(port_);
  s.send_all(make_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 20, "stream": true})"));
  ASSERT_TRUE(eventually([&] { return server_->context().num_active_jobs.load() == 1; }));
  EXPECT_TRUE(server_->drain(5000ms));
  std::string buf;
  auto r = read_response(s, buf);
  EXPECT_EQ(sse_payloads(r.body).back(), "[DONE]");
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 0);  // no longer accepting
}

}  // namespace
}  // namespace actorserve::testing
