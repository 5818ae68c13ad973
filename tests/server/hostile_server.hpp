#pragma once
/// The fixture of the hostile-client tests: the real server on 127.0.0.1 around the scripted
/// engine, restartable with another configuration, and functions that time the server's closes.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <thread>

#include "fake_engine.hpp"
#include "http_client.hpp"
#include "server/context.hpp"
#include "server/serve.hpp"
#include "test_data.hpp"

namespace actorserve::testing {

class HostileServerTest : public ::testing::Test {
 protected:
  using steady = std::chrono::steady_clock;

  void SetUp() override {
    auto tok = protocol::tokenizer::from_model_dir(model_dir("llama-tiny"));
    ASSERT_TRUE(tok.ok()) << tok.err().message;
    engine_ = std::make_unique<fake_engine>(std::move(*tok));
    engine_config cfg;
    cfg.model.served_model_name = "tiny";
    start(cfg);
    server_->context().header_timeout_ms = 1000;
  }
  void TearDown() override {
    engine_->shutdown(std::chrono::milliseconds(0));
    server_.reset();
  }
  /// A fresh server on the same engine with `cfg` (port 0; the header deadline is 10 s again).
  void start(engine_config cfg) {
    server_.reset();
    cfg.server.port = 0;
    auto srv = server::http_server::start(*engine_, cfg);
    ASSERT_TRUE(srv.ok()) << srv.err().message;
    server_ = std::move(*srv);
    port_ = server_->port();
  }
  /// start() with another --idle-timeout.
  void restart(int64_t idle_timeout_s) {
    engine_config cfg;
    cfg.server.idle_timeout_s = idle_timeout_s;
    start(cfg);
  }
  /// connections_timed_out, once it reaches `want` or 2 s passed (the client may see the close
  /// before the server's handler counts it).
  int64_t timed_out(int64_t want = 0) {
    const auto give_up = steady::now() + std::chrono::seconds(2);
    while (server_->context().stats.connections_timed_out.load() < want && steady::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return server_->context().stats.connections_timed_out.load();
  }
  /// Waits up to `limit` until the engine saw a cancel for any request; true when it did.
  bool engine_cancelled_within(std::chrono::milliseconds limit) {
    const auto give_up = steady::now() + limit;
    while (engine_->num_cancelled() == 0 && steady::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return engine_->num_cancelled() > 0;
  }

  /// Seconds until the server closes `s` (reads and discards what it sends); -1 after `limit`.
  static double seconds_until_closed(client_socket& s, std::chrono::milliseconds limit) {
    const auto t0 = steady::now();
    timeval tv{static_cast<time_t>(limit.count() / 1000), static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
    ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string buf;
    while (s.read_some(buf)) {}
    const double secs = std::chrono::duration<double>(steady::now() - t0).count();
    return secs >= std::chrono::duration<double>(limit).count() ? -1 : secs;
  }
  /// Gives reads on `s` a timeout, so that a missing answer fails the test instead of hanging it.
  static void receive_timeout(client_socket& s, int seconds) {
    timeval tv{seconds, 0};
    ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  std::unique_ptr<fake_engine> engine_;
  std::unique_ptr<server::http_server> server_;
  uint16_t port_ = 0;
};

}  // namespace actorserve::testing
