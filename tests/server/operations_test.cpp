// What an operator and a browser page see: CORS (--allowed-origins), /health and /metrics open
// beside an API key unless guarded, and the periodic stats line.
#include <gtest/gtest.h>

#include "hostile_server.hpp"
#include "server/cors.hpp"
#include "server/metrics.hpp"
#include "server/stats_log.hpp"

namespace actorserve::testing {
namespace {

using Operations = HostileServerTest;

TEST(Cors, OnlyAllowedOriginsGetHeaders) {
  const std::vector<std::string> allowed{"http://app.test"};
  EXPECT_EQ(server::cors_headers(allowed, {"http://evil.test", false, "", ""}), "");
  EXPECT_EQ(server::cors_headers(allowed, {"", false, "", ""}), "");
  EXPECT_EQ(server::cors_headers({}, {"http://app.test", false, "", ""}), "");
  EXPECT_EQ(server::cors_headers(allowed, {"http://app.test", false, "", ""}),
            "Access-Control-Allow-Origin: http://app.test\r\nVary: Origin\r\n");
  const std::string preflight =
      server::cors_headers({"*"}, {"http://any.test", true, "authorization, content-type", "POST, OPTIONS"});
  EXPECT_NE(preflight.find("Access-Control-Allow-Origin: http://any.test\r\n"), std::string::npos) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Methods: POST, OPTIONS\r\n"), std::string::npos) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Headers: authorization, content-type\r\n"), std::string::npos);
}

TEST_F(Operations, ABrowserPageOnAnAllowedOriginCanCallTheApiWithAKey) {
  engine_config cfg;
  cfg.server.api_key = "sk-test";
  cfg.server.allowed_origins = {"http://app.test"};
  start(cfg);
  // The preflight carries no key and must pass.
  auto pre = http_call(port_, "OPTIONS", "/v1/completions", "",
                       {"Origin: http://app.test", "Access-Control-Request-Method: POST",
                        "Access-Control-Request-Headers: authorization, content-type"});
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.headers["access-control-allow-origin"], "http://app.test");
  EXPECT_EQ(pre.headers["access-control-allow-methods"], "POST, OPTIONS");
  EXPECT_EQ(pre.headers["access-control-allow-headers"], "authorization, content-type");
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})",
                     {"Origin: http://app.test", "Authorization: Bearer sk-test"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "http://app.test");
  auto stream = http_call(port_, "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2,"stream":true})",
                          {"Origin: http://app.test", "Authorization: Bearer sk-test"});
  EXPECT_EQ(stream.headers["access-control-allow-origin"], "http://app.test");
  // A refusal is readable by the page too.
  auto denied = http_call(port_, "POST", "/v1/completions", "{}", {"Origin: http://app.test"});
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(denied.headers["access-control-allow-origin"], "http://app.test");
  auto other = http_call(port_, "GET", "/health", "", {"Origin: http://evil.test"});
  EXPECT_EQ(other.headers.count("access-control-allow-origin"), 0u);
}

TEST_F(Operations, HealthAndMetricsAreOpenBesideAnApiKeyUnlessGuarded) {
  engine_config cfg;
  cfg.server.api_key = "sk-test";
  start(cfg);
  EXPECT_EQ(http_call(port_, "GET", "/metrics").status, 200);
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
  cfg.server.api_key_guards_metrics = true;
  start(cfg);
  EXPECT_EQ(http_call(port_, "GET", "/metrics").status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/metrics", "", {"Authorization: Bearer sk-test"}).status, 200);
}

TEST_F(Operations, ABrowserWebSocketMayCarryTheKeyInTheUrl) {
  engine_config cfg;
  cfg.server.api_key = "sk-te/st";
  start(cfg);
  auto upgrade = [&](const std::string& target) {
    client_socket s(port_);
    receive_timeout(s, 5);
    s.send_all("GET " + target + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    std::string buf;
    while (buf.find("\r\n\r\n") == std::string::npos && s.read_some(buf)) {}
    return buf.substr(9, 3);
  };
  EXPECT_EQ(upgrade("/v1/stream?api_key=sk-te%2Fst"), "101");
  EXPECT_EQ(upgrade("/v1/stream?x=1&api_key=sk-te%2fst"), "101");
  EXPECT_EQ(upgrade("/v1/stream?api_key=wrong"), "401");
  EXPECT_EQ(upgrade("/v1/stream"), "401");
}

TEST_F(Operations, VllmCompatibleMetricsCarryVllmNamesAndPerRequestHistograms) {
  engine_config cfg;
  cfg.model.served_model_name = "m";
  cfg.server.metrics_vllm_names = true;
  start(cfg);
  ASSERT_EQ(http_call(port_, "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":3})").status, 200);
  const auto page = http_call(port_, "GET", "/metrics").body;
  for (const char* want : {"# TYPE vllm:num_requests_running gauge\n", "vllm:num_requests_running{model_name=\"m\"} ",
                           "vllm:prompt_tokens_total{model_name=\"m\"} ",
                           "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 1\n",
                           "vllm:request_generation_tokens_bucket{model_name=\"m\",le=\"5\"} 1\n",
                           "vllm:request_generation_tokens_bucket{model_name=\"m\",le=\"2\"} 0\n",
                           "vllm:request_prompt_tokens_count{model_name=\"m\"} 1\n",
                           "vllm:request_decode_time_seconds_count{model_name=\"m\"} 1\n",
                           "vllm:request_queue_time_seconds_count{model_name=\"m\"} 1\n",
                           "vllm:request_prefill_time_seconds_count{model_name=\"m\"} 1\n",
                           "vllm:request_inference_time_seconds_count{model_name=\"m\"} 1\n",
                           "vllm:request_params_n_bucket{model_name=\"m\",le=\"1\"} 1\n",
                           "vllm:request_params_max_tokens_bucket{model_name=\"m\",le=\"5\"} 1\n",
                           "# TYPE vllm:iteration_tokens_total histogram\n",
                           "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"16384\"} ",
                           "vllm:time_per_output_token_seconds_count{model_name=\"m\"} ",
                           "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"7680\"} 1\n",
                           "vllm:prefix_cache_hits_total{model_name=\"m\"} ",
                           "vllm:num_preemptions_total{model_name=\"m\"} ",
                           "vllm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 1\n",
                           "actorserve:open_connections{model_name=\"m\"} "})
    EXPECT_NE(page.find(want), std::string::npos) << want;
  EXPECT_EQ(page.find("actorserve:num_requests_running"), std::string::npos);
}

TEST(Metrics, RoutedTokensPerSparseLayerAndExpert) {
  const server::metrics m;
  actors::engine_stats s;
  EXPECT_EQ(m.render(s, "m", 0).find("moe_expert_tokens"), std::string::npos) << "a dense model has none";
  s.moe_layers = {0, 2};
  s.num_experts = 2;
  s.moe_expert_tokens = {5, 1, 0, 6};
  const std::string page = m.render(s, "m", 0, true);
  for (const char* want : {"# TYPE actorserve:moe_expert_tokens_total counter\n",
                           "actorserve:moe_expert_tokens_total{model_name=\"m\",layer=\"0\",expert=\"0\"} 5\n",
                           "actorserve:moe_expert_tokens_total{model_name=\"m\",layer=\"0\",expert=\"1\"} 1\n",
                           "actorserve:moe_expert_tokens_total{model_name=\"m\",layer=\"2\",expert=\"0\"} 0\n",
                           "actorserve:moe_expert_tokens_total{model_name=\"m\",layer=\"2\",expert=\"1\"} 6\n"})
    EXPECT_NE(page.find(want), std::string::npos) << want;
}

TEST(StatsLine, RatesOverTheIntervalAndNothingWhileIdle) {
  actors::engine_stats before, now;
  EXPECT_FALSE(server::stats_line(before, now, 10).has_value());
  now.prompt_tokens = 1000;
  now.generation_tokens = 250;
  now.num_running = 3;
  now.num_waiting = 1;
  now.kv_blocks_total = 200;
  now.kv_blocks_used = 50;
  now.prefix_cache_queries = 400;
  now.prefix_cache_hits = 100;
  now.num_preemptions = 2;
  auto line = server::stats_line(before, now, 10);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "stats: prompt 100.0 tok/s, generation 25.0 tok/s, running 3, waiting 1, KV cache 25.0 % used, "
            "prefix cache hits 25.0 %, preemptions 2 (+2)");
}

}  // namespace
}  // namespace actorserve::testing
