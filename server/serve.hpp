#pragma once
/// The HTTP/WebSocket server around an engine, and `run_server`, what `actorserve serve` calls.
#include <chrono>
#include <cstdint>
#include <memory>

#include "actors/engine.hpp"
#include "config/engine_config.hpp"
#include "config/error.hpp"

namespace actorserve::server {

struct server_context;

/// Listens on cfg.server.host:port (port 0: any free port) with cfg.server.io_threads threads.
class http_server {
 public:
  /// Binds and starts serving. Errors name the flag (--host, --port, --chat-template).
  static result<std::unique_ptr<http_server>> start(actors::engine& engine, const engine_config& cfg);
  /// Stops (as stop()) if still running.
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The bound port.
  uint16_t port() const;
  server_context& context();
  /// Stops accepting and refuses new requests (503); waits up to `grace` for in-flight requests.
  /// Returns true when none is left.
  bool drain(std::chrono::milliseconds grace);
  /// Waits up to `timeout` until no request is in flight; true when none is left.
  bool wait_idle(std::chrono::milliseconds timeout);
  /// Stops the I/O threads and drops every connection. Idempotent.
  void stop();

 private:
  struct impl;
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (one descriptor per connection:
/// the default 1024 caps --max-connections far below its default). Returns the soft limit now.
int64_t raise_open_file_limit();

/// Starts the engine (in this process, or a front end of --engines) and the server, logs
/// "listening on http://HOST:PORT", serves until SIGTERM or SIGINT, then drains
/// (--drain-timeout) and returns 0; returns 1 when start-up fails.
int run_server(const engine_config& cfg);

/// `actorserve engine`: starts the engine, publishes it at --listen, logs "engine listening on
/// HOST:PORT", runs until SIGTERM or SIGINT, then stops it (front ends move its requests
/// elsewhere) and returns 0; returns 1 when start-up fails.
int run_engine(const engine_config& cfg);

}  // namespace actorserve::server
