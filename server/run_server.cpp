#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include "config/log.hpp"
#include "server/serve.hpp"

namespace actorserve::server {

int64_t raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(lim.rlim_cur);
}

namespace {

/// Blocks SIGINT/SIGTERM in this thread before any other starts, so every thread inherits the
/// mask and the signal is taken by sigwait, not by an arbitrary engine or I/O thread.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

}  // namespace

int run_engine(const engine_config& cfg) {
  sigset_t signals = block_stop_signals();
  auto engine = actors::engine::start(cfg);
  if (!engine) {
    log::error("cannot start the engine: {}", engine.err().message);
    return 1;
  }
  auto port = (*engine)->publish();
  if (!port) {
    log::error("cannot publish the engine: {}", port.err().message);
    (*engine)->shutdown(std::chrono::milliseconds(0));
    return 1;
  }
  log::info("engine listening on {}:{}{} (model {})", cfg.cluster.listen->host, *port,
            cfg.cluster.tls.enabled() ? " with TLS" : "", (*engine)->model_name());
  int sig = 0;
  sigwait(&signals, &sig);
  log::info("signal {}: stopping the engine", sig);
  (*engine)->shutdown(std::chrono::milliseconds(0));
  engine->reset();
  log::info("stopped");
  return 0;
}

int run_server(const engine_config& cfg) {
  const int64_t descriptors = raise_open_file_limit();
  if (descriptors >= 0 && descriptors < cfg.server.max_connections + 64)
    log::warn("--max-connections {} but only {} file descriptors (ulimit -n): connections beyond are refused",
              cfg.server.max_connections, descriptors);
  sigset_t signals = block_stop_signals();

  auto engine = cfg.cluster.engines.empty() ? actors::engine::start(cfg) : actors::engine::connect(cfg);
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
  server->reset();  // connections (and their cancel guards) go before the engine
  engine->reset();
  log::info("stopped");
  return 0;
}

}  // namespace actorserve::server
