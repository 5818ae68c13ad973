#pragma once
// The real engine (actors + CPU executor) and the HTTP server around it, started once for a
// test suite (SetUpTestSuite / TearDownTestSuite).
#include <gtest/gtest.h>

#include "actors/engine.hpp"
#include "server/serve.hpp"

namespace actorserve::testing {

inline void start_engine_server(const engine_config& cfg, actors::engine*& engine, server::http_server*& server) {
  auto e = actors::engine::start(cfg);
  ASSERT_TRUE(e.ok()) << e.err().message;
  engine = std::move(*e).release();
  auto s = server::http_server::start(*engine, cfg);
  ASSERT_TRUE(s.ok()) << s.err().message;
  server = std::move(*s).release();
}

inline void stop_engine_server(actors::engine*& engine, server::http_server*& server) {
  if (engine) engine->shutdown(std::chrono::milliseconds(0));
  delete server;
  delete engine;
  server = nullptr;
  engine = nullptr;
}

}  // namespace actorserve::testing
