// Hostile clients against the server (scripted engine, real sockets on 127.0.0.1): the limits
// that the hostile storm (bench/storm) found or relies on, each pinned by a test.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <thread>

#include "hostile_server.hpp"
#include "ws_client.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;

using HostileClients = HostileServerTest;

TEST_F(HostileClients, SlowlorisHeadersAreCutAtTheHeaderDeadlineNotTheIdleTimeout) {
  client_socket s(port_);
  ASSERT_TRUE(s.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  std::atomic<bool> stop{false};
  std::thread dribbler([&] {
    while (!stop && s.send_all("a")) std::this_thread::sleep_for(100ms);
  });
  const double secs = seconds_until_closed(s, 8000ms);
  stop = true;
  dribbler.join();
  EXPECT_GT(secs, 0.8);  // the header deadline (1 s here), far below --idle-timeout 60
  EXPECT_LT(secs, 4.0);
  EXPECT_EQ(timed_out(1), 1);
}

TEST_F(HostileClients, ANewConnectionThatSendsNothingIsClosedAtTheHeaderDeadline) {
  client_socket s(port_);
  const double secs = seconds_until_closed(s, 8000ms);
  EXPECT_GT(secs, 0.8);
  EXPECT_LT(secs, 4.0);
  EXPECT_EQ(timed_out(1), 1);
}

TEST_F(HostileClients, AKeptAliveConnectionMayIdleLongerThanTheHeaderDeadline) {
  client_socket s(port_);
  std::string buf;
  ASSERT_TRUE(s.send_all(make_request("GET", "/health", "")));
  EXPECT_EQ(read_response(s, buf).status, 200);
  std::this_thread::sleep_for(1500ms);  // past the header deadline, within --idle-timeout
  ASSERT_TRUE(s.send_all(make_request("GET", "/health", "")));
  EXPECT_EQ(read_response(s, buf).status, 200);
  EXPECT_EQ(timed_out(), 0);
}

TEST_F(HostileClients, ADribbledBodyGetsTheIdleTimeoutNotForever) {
  restart(2);
  client_socket s(port_);
  ASSERT_TRUE(s.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"));
  std::atomic<bool> stop{false};
  std::thread dribbler([&] {
    while (!stop && s.send_all("a")) std::this_thread::sleep_for(100ms);
  });
  const double secs = seconds_until_closed(s, 10000ms);
  stop = true;
  dribbler.join();
  EXPECT_GT(secs, 1.5);
  EXPECT_LT(secs, 6.0);
  EXPECT_EQ(timed_out(1), 1);
}

TEST_F(HostileClients, InvalidUtf8AndDeepJsonAre400WithAnOpenAIError) {
  const std::string bodies[] = {
      "{\"prompt\": \"\xff\xfe\", \"max_tokens\": 2}",
      "{\"prompt\": \"a\", \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
      std::string(50000, '[') + std::string(50000, ']'),
  };
  for (const auto& body : bodies) {
    auto r = http_call(port_, "POST", "/v1/completions", body);
    EXPECT_EQ(r.status, 400) << body.substr(0, 40);
    EXPECT_NE(r.body.find("\"invalid_request_error\""), std::string::npos) << r.body;
  }
  EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
}

TEST_F(HostileClients, AcceptBacksOffWhenOutOfDescriptorsAndRecovers) {
  // Sockets made before the limit drops: connecting them needs no new descriptor here, but the
  // server's accept does, and fails with EMFILE until the limit is restored.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int64_t refused_before = server_->context().stats.connections_refused.load();
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(::socket(AF_INET, SOCK_STREAM, 0));
  // The limit is the lowest free descriptor: every new one (the server's accept) fails with EMFILE.
  int lowest_free = 0;
  while (::fcntl(lowest_free, F_GETFD) != -1) ++lowest_free;
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int fd : fds) ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::this_thread::sleep_for(1000ms);
  const int64_t refused = server_->context().stats.connections_refused.load() - refused_before;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_GE(refused, 1);    // accept did fail
  EXPECT_LE(refused, 100);  // at most one retry per 50 ms back-off, not a busy loop
  // Restored: the queued connections are accepted and served.
  const std::string req = make_request("GET", "/health", "");
  for (int fd : fds) {
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    char buf[64] = {};
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    ASSERT_GT(n, 12);
    EXPECT_EQ(std::string(buf, 12), "HTTP/1.1 200");
    ::close(fd);
  }
}

TEST_F(HostileClients, AWebSocketRunsAtMost256RequestsAtOnce) {
  engine_->step = 100ms;  // 40 steps: every request is still running when the last one arrives
  ws_client ws(port_);
  ASSERT_TRUE(ws.ok());
  timeval tv{10, 0};  // without the cap no error comes: fail, do not hang
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const size_t cap = server::connection_limits::max_ws_requests;
  for (size_t i = 0; i <= cap; ++i)
    ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"r)" + std::to_string(i) +
                             R"(","body":{"prompt":"hi","max_tokens":40}})"));
  std::optional<std::string> error;
  for (int i = 0; i < 100000 && !error; ++i) {
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value());
    if (text->find("\"type\":\"error\"") != std::string::npos) error = text;
  }
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("\"id\":\"r256\""), std::string::npos) << *error;
  EXPECT_NE(error->find("too many running requests"), std::string::npos) << *error;
  // The refusal can come before the others are prepared (on the prompt pool) and submitted.
  const auto give_up = steady::now() + 5s;
  while (engine_->num_submitted.load() < static_cast<int>(cap) && steady::now() < give_up)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine_->num_submitted.load(), static_cast<int>(cap));
}

TEST_F(HostileClients, AnIdleWebSocketIsPingedThenClosedWhenThePeerIsSilent) {
  restart(2);
  ws_client ws(port_);
  ASSERT_TRUE(ws.ok());
  timeval tv{10, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = steady::now();
  auto ping = ws.read_frame();
  ASSERT_TRUE(ping.has_value());
  EXPECT_EQ(ping->opcode, 9);  // after half of --idle-timeout without traffic
  const double ping_s = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_GT(ping_s, 0.7);
  EXPECT_LT(ping_s, 3.0);
  while (ws.read_frame()) {}  // no pong: closed once --idle-timeout passes
  const double closed_s = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_GT(closed_s, 1.5);
  EXPECT_LT(closed_s, 6.0);
}

// A WebSocket client that stops reading while a long request streams: once that request's
// frames fill the connection's queue (connection_limits), the request is cut — its engine request
// cancelled, an error frame queued for its id — and the connection still serves the next one.
TEST_F(HostileClients, AWebSocketThatStopsReadingHasTheStreamCutNotTheConnection) {
  engine_->context_length = 1 << 20;
  restart(60);  // the server reads the context length when it starts
  engine_->step = std::chrono::microseconds(0);
  engine_->text_suffix = std::string(4096, 'z');  // 80 MB over 20000 tokens: far past the queue limit
  ws_client ws(port_, 4096);
  ASSERT_TRUE(ws.ok());
  timeval tv{10, 0};  // fail, do not hang
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"big","body":{"prompt":"x","max_tokens":20000}})"));
  const auto give_up = steady::now() + 10s;
  while (server_->context().stats.streams_cut.load() == 0 && steady::now() < give_up) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server_->context().stats.streams_cut.load(), 1);
  std::optional<std::string> error;
  size_t deltas = 0;
  while (!error) {
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value()) << "the connection ended before the error frame, after " << deltas << " deltas";
    if (text->find("\"type\":\"error\"") != std::string::npos) error = text;
    else ++deltas;
  }
  EXPECT_NE(error->find("\"id\":\"big\""), std::string::npos) << *error;
  EXPECT_NE(error->find("did not read fast enough"), std::string::npos) << *error;
  EXPECT_LT(deltas, 20000u);
  EXPECT_TRUE(engine_->num_cancelled() == 1 || engine_->num_refused_by_sink.load() == 1);
  ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"next","body":{"prompt":"x","max_tokens":2}})"));
  std::optional<std::string> done;
  while (!done) {
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value()) << "no answer to the request after the cut";
    ASSERT_EQ(text->find("\"type\":\"error\""), std::string::npos) << *text;
    if (text->find("\"type\":\"done\"") != std::string::npos) done = text;
  }
  EXPECT_NE(done->find("\"id\":\"next\""), std::string::npos) << *done;
  EXPECT_EQ(server_->context().stats.streams_cut.load(), 1);
}

TEST(OpenFileLimit, IsRaisedToTheHardLimitForManyConnections) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 256) GTEST_SKIP() << "hard limit too low to lower";
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  const int64_t now = server::raise_open_file_limit();
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(after.rlim_cur, saved.rlim_max);
  EXPECT_GT(now, 256);
}

}  // namespace
}  // namespace actorserve::testing
