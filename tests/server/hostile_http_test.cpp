// Hostile and unusual HTTP clients against the server (scripted engine, real sockets): fan-out
// and response-size bounds, disconnects seen behind pipelined bytes, half-closed clients,
// Expect: 100-continue, prompt work off the I/O thread, and the HTTP edges (HEAD, 405, 415,
// the Bearer scheme). docs/reliability.md lists the limits and their flags.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "hostile_server.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;
using HostileHttp = HostileServerTest;

std::string completion_body(int max_tokens, bool stream = false) {
  return R"({"prompt":"hi","max_tokens":)" + std::to_string(max_tokens) + (stream ? R"(,"stream":true})" : "}");
}

TEST_F(HostileHttp, ARequestOverTheSequenceCapIs400NamingTheFlag) {
  std::string prompts = "[";
  for (int i = 0; i < 300; ++i) prompts += std::string(i ? "," : "") + "\"p\"";
  prompts += "]";
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt":)" + prompts + R"(,"n":4,"max_tokens":1})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--max-seqs-per-request"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("1200 sequences"), std::string::npos) << r.body;
  EXPECT_EQ(engine_->num_submitted.load(), 0);
}

TEST_F(HostileHttp, EachPromptOfAListWaitsBehindTheSameRankOfOtherRequests) {
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt":["a","b","c"],"max_tokens":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_->priorities(), (std::vector<int32_t>{0, 1, 2}));
}

TEST_F(HostileHttp, ANonStreamedResponseOverItsByteBoundIs400AndCancelled) {
  engine_config cfg;
  cfg.server.max_response_bytes = 64 << 10;
  start(cfg);
  engine_->text_suffix = std::string(1024, 'z');  // 1 KiB a token: past 64 KiB within 8 tokens of n = 8
  auto r = http_call(port_, "POST", "/v1/completions", R"({"prompt":"hi","n":8,"max_tokens":60})");
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("--max-response-bytes"), std::string::npos) << r.body.substr(0, 300);
  EXPECT_LT(r.body.size(), 4096u);
  EXPECT_TRUE(engine_cancelled_within(2000ms));
}

// The client sends its request, then one byte of the next one, then leaves: the engine must
// hear of it at once, not when the generation ends.
TEST_F(HostileHttp, ADisconnectBehindAPipelinedByteCancelsTheRequest) {
  engine_->step = 100ms;  // 60 tokens: 6 s
  client_socket s(port_);
  ASSERT_TRUE(s.send_all(make_request("POST", "/v1/completions", completion_body(60))));
  std::this_thread::sleep_for(200ms);  // the request is read and runs: the byte comes on its own
  ASSERT_TRUE(s.send_all("G"));
  std::this_thread::sleep_for(200ms);
  s.close();
  EXPECT_TRUE(engine_cancelled_within(3000ms));
}

TEST_F(HostileHttp, AClientThatClosesWhileWaitingForAWholeResponseIsCancelled) {
  engine_->step = 100ms;
  client_socket s(port_);
  ASSERT_TRUE(s.send_all(make_request("POST", "/v1/completions", completion_body(60))));
  std::this_thread::sleep_for(200ms);
  s.close();
  EXPECT_TRUE(engine_cancelled_within(3000ms));
}

TEST_F(HostileHttp, AHalfClosedClientGetsItsWholeResponse) {
  engine_->step = 20ms;  // the EOF arrives long before the last token
  client_socket s(port_);
  receive_timeout(s, 10);
  ASSERT_TRUE(s.send_all(make_request("POST", "/v1/completions", completion_body(8))));
  ASSERT_EQ(::shutdown(s.fd(), SHUT_WR), 0);
  std::string buf;
  auto r = read_response(s, buf);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"finish_reason\":\"length\""), std::string::npos) << r.body;
  EXPECT_EQ(engine_->num_cancelled(), 0u);
}

TEST_F(HostileHttp, AHalfClosedClientGetsItsWholeStream) {
  engine_->step = 20ms;
  client_socket s(port_);
  receive_timeout(s, 10);
  ASSERT_TRUE(s.send_all(make_request("POST", "/v1/completions", completion_body(20, true))));
  ASSERT_EQ(::shutdown(s.fd(), SHUT_WR), 0);
  std::string buf;
  auto r = read_response(s, buf);
  EXPECT_EQ(r.status, 200);
  const auto events = sse_payloads(r.body);
  ASSERT_FALSE(events.empty()) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(engine_->num_cancelled(), 0u);
}

TEST_F(HostileHttp, PipelinedRequestsBeforeAHalfCloseAreAllAnswered) {
  engine_->step = 20ms;
  client_socket s(port_);
  receive_timeout(s, 10);
  ASSERT_TRUE(s.send_all(make_request("POST", "/v1/completions", completion_body(4)) +
                         make_request("GET", "/health", "")));
  ASSERT_EQ(::shutdown(s.fd(), SHUT_WR), 0);
  std::string buf;
  EXPECT_EQ(read_response(s, buf).status, 200);
  EXPECT_EQ(read_response(s, buf).status, 200);
}

TEST_F(HostileHttp, ExpectContinueIsAnsweredBeforeTheBody) {
  client_socket s(port_);
  receive_timeout(s, 2);
  const std::string body = completion_body(2);
  ASSERT_TRUE(s.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  std::string buf;
  while (buf.find("\r\n\r\n") == std::string::npos)
    ASSERT_TRUE(s.read_some(buf)) << "no 100 Continue within 2 s";
  EXPECT_EQ(buf.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << buf;
  buf.clear();
  ASSERT_TRUE(s.send_all(body));
  EXPECT_EQ(read_response(s, buf).status, 200);
}

TEST_F(HostileHttp, AnUnknownExpectationIs417) {
  auto r = http_call(port_, "POST", "/v1/completions", completion_body(2), {"Expect: 200-ok"});
  EXPECT_EQ(r.status, 417) << r.body;
}

TEST_F(HostileHttp, CompressedBodiesAre415) {
  client_socket s(port_);
  receive_timeout(s, 5);
  ASSERT_TRUE(s.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n"));
  std::string buf;
  auto r = read_response(s, buf);
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_NE(r.body.find("Transfer-Encoding"), std::string::npos) << r.body;
  r = http_call(port_, "POST", "/v1/completions", completion_body(2), {"Content-Encoding: gzip"});
  EXPECT_EQ(r.status, 415) << r.body;
}

TEST_F(HostileHttp, HeadIsAnsweredLikeGetWithoutTheBody) {
  const auto get = http_call(port_, "GET", "/v1/models");
  ASSERT_EQ(get.status, 200);
  client_socket s(port_);
  receive_timeout(s, 2);
  ASSERT_TRUE(s.send_all("HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string buf;
  while (s.read_some(buf)) {}
  EXPECT_EQ(buf.rfind("HTTP/1.1 200", 0), 0u) << buf;
  EXPECT_NE(buf.find("Content-Length: " + std::to_string(get.body.size()) + "\r\n"), std::string::npos) << buf;
  EXPECT_EQ(buf.size(), buf.find("\r\n\r\n") + 4) << "a HEAD answer carries no body";
  EXPECT_EQ(http_call(port_, "HEAD", "/health").status, 200);
}

TEST_F(HostileHttp, AWrongMethodIs405WithAllowAndAnUnknownPathIs404) {
  auto r = http_call(port_, "PUT", "/v1/models", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD, OPTIONS");
  r = http_call(port_, "GET", "/v1/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST, OPTIONS");
  EXPECT_NE(r.body.find("\"invalid_request_error\""), std::string::npos) << r.body;
  EXPECT_EQ(http_call(port_, "DELETE", "/nowhere").status, 404);
  r = http_call(port_, "OPTIONS", "/v1/chat/completions");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(r.headers["allow"], "POST, OPTIONS");
}

TEST_F(HostileHttp, TheBearerSchemeIsCaseInsensitive) {
  engine_config cfg;
  cfg.server.api_key = "sk-test";
  start(cfg);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", "", {"Authorization: bearer sk-test"}).status, 200);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", "", {"Authorization: BEARER  sk-test"}).status, 200);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", "", {"Authorization: Bearer sk-tes"}).status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", "", {"Authorization: Basic sk-test"}).status, 401);
  EXPECT_EQ(http_call(port_, "GET", "/v1/models", "", {"Authorization: Bearersk-test"}).status, 401);
}

// A prompt that takes seconds to tokenize is tokenized on the prompt pool: the one I/O thread
// keeps answering everyone else meanwhile.
TEST_F(HostileHttp, ALongPromptDoesNotStallOtherClients) {
  engine_->context_length = int64_t{1} << 30;  // no byte bound: the prompt is really tokenized
  engine_config cfg;
  cfg.server.max_body_bytes = 64 << 20;
  start(cfg);
  const std::string body = R"({"prompt":")" + std::string(2 << 20, ' ') + R"(","max_tokens":1})";
  std::atomic<bool> done{false};
  std::thread big([&] {
    http_call(port_, "POST", "/v1/completions", body);
    done = true;
  });
  std::this_thread::sleep_for(300ms);  // the body is in; the prompt is being tokenized
  double worst = 0;
  int probes = 0;
  while (!done && probes < 50) {
    const auto t0 = steady::now();
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
    worst = std::max(worst, std::chrono::duration<double>(steady::now() - t0).count());
    ++probes;
    std::this_thread::sleep_for(20ms);
  }
  big.join();
  EXPECT_GT(probes, 2) << "the long prompt finished too soon to show anything";
  EXPECT_LT(worst, 0.5) << "a /health probe waited behind the tokenizer";
}

TEST_F(HostileHttp, StreamsKeepFlowingWhileALongPromptIsTokenized) {
  engine_->context_length = int64_t{1} << 30;
  engine_config cfg;
  cfg.server.max_body_bytes = 64 << 20;
  start(cfg);
  engine_->step = 20ms;  // 100 tokens: 2 s of stream
  client_socket stream(port_);
  receive_timeout(stream, 10);
  ASSERT_TRUE(stream.send_all(make_request("POST", "/v1/completions", completion_body(100, true))));
  std::string buf;
  ASSERT_TRUE(stream.read_some(buf));  // streaming has begun
  std::thread big([&] {
    http_call(port_, "POST", "/v1/completions", R"({"prompt":")" + std::string(2 << 20, ' ') + R"(","max_tokens":1})");
  });
  double worst_gap = 0;
  auto last = steady::now();
  while (buf.find("[DONE]") == std::string::npos && stream.read_some(buf)) {
    const auto now = steady::now();
    worst_gap = std::max(worst_gap, std::chrono::duration<double>(now - last).count());
    last = now;
  }
  big.join();
  EXPECT_NE(buf.find("[DONE]"), std::string::npos);
  EXPECT_LT(worst_gap, 0.5) << "the stream stalled while the prompt was tokenized";
}

TEST_F(HostileHttp, APromptTooLongForTheContextIsRefusedByItsBytesBeforeTokenizing) {
  engine_config cfg;
  cfg.server.max_body_bytes = 64 << 20;
  start(cfg);  // the fake engine's context: 64 tokens
  const auto t0 = steady::now();
  auto r = http_call(port_, "POST", "/v1/completions",
                     R"({"prompt":")" + std::string(4 << 20, ' ') + R"(","max_tokens":1})");
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("maximum context length is 64 tokens, and a prompt of"), std::string::npos) << r.body;
  EXPECT_LT(secs, 2.0);
}

}  // namespace
}  // namespace actorserve::testing
