#include <pthread.h>
#include <signal.h>

#include "config/log.hpp"
#include "server/serve.hpp"

namespace actorserve::server {

int run_server(const engine_config& cfg) {
  // Block SIGINT/SIGTERM before any thread starts, so every thread inherits the mask and the
  // signal is taken here by sigwait, not by an arbitrary engine or I/O thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto engine = actors::engine::start(cfg);
  if (!engine) {
    log::error("cannot start the engine: {}", engine.err().message);
    return 1;
  }
  auto server = http_server::start(**engine, cfg);
  if (!server) {
    log::error("cannot start the server: {}", server.err().message);
    (*engine)->shutdown(std::chrono::milliseconds(0));
    return 1;
  }
  log::info("listening on http://{}:{} (model {})", cfg.server.host, (*server)->port(), (*engine)->model_name());

  int sig = 0;
  sigwait(&signals, &sig);
  const auto grace = std::chrono::seconds(cfg.server.drain_timeout_s);
  log::info("signal {}: draining (up to {} s)", sig, cfg.server.drain_timeout_s);
  const bool drained = (*server)->drain(grace);
  if (!drained) log::warn("drain timeout: cancelling the requests still running");
  (*engine)->shutdown(std::chrono::milliseconds(0));
  (*server)->wait_idle(std::chrono::seconds(2));
  (*server)->stop();
  server->reset();  // sessions (and their cancel guards) go before the engine
  engine->reset();
  log::info("stopped");
  return 0;
}

}  // namespace actorserve::server
