// Hostile WebSocket clients against the server (scripted engine, real sockets, a hand-written
// client): every queued frame counts against the connection's bound, a message has a deadline,
// frames sent with the upgrade are served, a duplicate id does not end the running request, and
// one connection's requests hold a bounded number of sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "hostile_server.hpp"
#include "ws_client.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;
using HostileWebSocket = HostileServerTest;

bool is_type(const std::string& frame, std::string_view type) {
  return frame.find("\"type\":\"" + std::string(type) + "\"") != std::string::npos;
}

// A client that never reads and sends a stream of invalid frames, each earning an error reply:
// the replies fill the connection's bound and the server closes the connection.
TEST_F(HostileWebSocket, ErrorRepliesToAClientThatNeverReadsAreBounded) {
  ws_client ws(port_, 4096);
  ASSERT_TRUE(ws.ok());
  const std::string junk = ws_client::frame("x");
  std::string burst;
  for (int i = 0; i < 1000; ++i) burst += junk;
  int sent = 0;
  for (; sent < 400; ++sent) {  // 400,000 frames would queue ~70 MB of error replies
    timeval tv{2, 0};
    ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (!ws.socket().send_all(burst)) break;
  }
  // Now read: the server must have given up on this connection, not kept every reply.
  timeval tv{10, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t errors = 0;
  std::optional<ws_frame> f;
  while ((f = ws.read_frame()) && f->opcode == 1) ++errors;
  EXPECT_FALSE(f.has_value() && f->opcode != 8) << "the connection is still open after " << errors << " replies";
  const size_t bound = server::connection_limits::max_ws_queued_bytes / 100;  // replies are > 100 bytes
  EXPECT_LT(errors, bound) << sent << " bursts sent";
}

TEST_F(HostileWebSocket, APartialMessageGetsTheIdleTimeoutToComplete) {
  restart(2);
  ws_client ws(port_);
  ASSERT_TRUE(ws.ok());
  const std::string frame = ws_client::frame(R"({"type":"completions","id":"a","body":{"prompt":"x"}})");
  ASSERT_TRUE(ws.socket().send_all(frame.substr(0, 8)));  // header and mask, then a byte at a time
  std::atomic<bool> stop{false};
  std::thread dribbler([&] {
    for (size_t i = 8; i + 1 < frame.size() && !stop; ++i) {
      if (!ws.socket().send_all(frame.substr(i, 1))) return;
      std::this_thread::sleep_for(200ms);
    }
  });
  const auto t0 = steady::now();
  timeval tv{12, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (auto f = ws.read_frame())
    if (f->opcode == 8) break;  // pings are read past; the close frame or EOF ends the wait
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  stop = true;
  dribbler.join();
  EXPECT_GT(secs, 1.5);
  EXPECT_LT(secs, 6.0) << "a dribbled message held the connection";
  EXPECT_EQ(timed_out(1), 1);
}

TEST_F(HostileWebSocket, FramesSentWithTheUpgradeRequestAreServed) {
  ws_client ws(port_, 0, ws_client::frame(R"({"type":"completions","id":"early","body":{"prompt":"x","max_tokens":2}})"));
  ASSERT_TRUE(ws.ok());
  timeval tv{5, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::optional<std::string> done;
  while (auto text = ws.read_text()) {
    ASSERT_FALSE(is_type(*text, "error")) << *text;
    if (is_type(*text, "done")) {
      done = text;
      break;
    }
  }
  ASSERT_TRUE(done.has_value()) << "no answer to the frame sent with the upgrade";
  EXPECT_NE(done->find("\"id\":\"early\""), std::string::npos) << *done;
}

TEST_F(HostileWebSocket, ADuplicateIdIsRefusedWithoutEndingTheRunningRequest) {
  engine_->step = 20ms;
  ws_client ws(port_);
  ASSERT_TRUE(ws.ok());
  timeval tv{10, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string request = R"({"type":"completions","id":"r1","body":{"prompt":"x","max_tokens":20}})";
  ASSERT_TRUE(ws.send_text(request));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(ws.send_text(request));
  std::optional<std::string> error, done;
  size_t deltas_after_error = 0;
  while (!done) {
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value()) << "the connection ended";
    if (is_type(*text, "error")) error = text;
    else if (is_type(*text, "done")) done = text;
    else if (error) ++deltas_after_error;
  }
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("\"id\":null"), std::string::npos) << *error;
  EXPECT_NE(error->find("'r1' is already running"), std::string::npos) << *error;
  EXPECT_NE(done->find("\"id\":\"r1\""), std::string::npos);
  EXPECT_GT(deltas_after_error, 0u);
  EXPECT_EQ(engine_->num_submitted.load(), 1);
}

TEST_F(HostileWebSocket, AConnectionsRequestsHoldABoundedNumberOfSequences) {
  engine_config cfg;
  cfg.server.max_seqs_per_request = 8;
  cfg.server.max_seqs_per_connection = 12;
  start(cfg);
  engine_->step = 50ms;
  ws_client ws(port_);
  ASSERT_TRUE(ws.ok());
  timeval tv{10, 0};
  ::setsockopt(ws.socket().fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"a","body":{"prompt":"x","n":8,"max_tokens":40}})"));
  for (;;) {  // a runs (requests are prepared in parallel: b must come after a started)
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value());
    if (is_type(*text, "delta")) break;
  }
  ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"b","body":{"prompt":"x","n":8,"max_tokens":1}})"));
  ASSERT_TRUE(ws.send_text(R"({"type":"completions","id":"c","body":{"prompt":"x","n":9,"max_tokens":1}})"));
  std::vector<std::string> errors;
  while (errors.size() < 2) {
    auto text = ws.read_text();
    ASSERT_TRUE(text.has_value());
    if (is_type(*text, "error")) errors.push_back(*text);
  }
  std::sort(errors.begin(), errors.end());  // b's and c's, in either order
  EXPECT_NE(errors[0].find("\"id\":\"b\""), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("--max-seqs-per-connection"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("\"id\":\"c\""), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("--max-seqs-per-request"), std::string::npos) << errors[1];
  EXPECT_EQ(engine_->num_submitted.load(), 1);
}

}  // namespace
}  // namespace actorserve::testing
