#pragma once
/// State every connection shares: the engine, the limits, the metrics, counters and the prompt
/// builder. Owned by http_server; connections hold a reference.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "actors/engine.hpp"
#include "config/engine_config.hpp"
#include "config/model_config.hpp"
#include "server/metrics.hpp"

namespace actorserve::server {

class prompt_builder;

/// Limits that are not flags, named beside the state they protect.
struct connection_limits {
  static constexpr uint32_t max_header_bytes = 16 * 1024;   ///< 431 beyond
  /// Request line + headers must arrive this soon (capped by --idle-timeout); then closed.
  static constexpr std::chrono::milliseconds header_timeout{10000};
  static constexpr size_t read_chunk_bytes = 4096;          ///< first read of a kept-alive request
  static constexpr size_t max_ws_requests = 256;            ///< running requests per WebSocket
  static constexpr size_t max_queued_chunks = 2048;         ///< per stream; then cut
  static constexpr size_t max_queued_bytes = 8 << 20;       ///< per stream; then cut
  /// Per WebSocket connection, over every frame queued (errors and last frames included):
  /// beyond it the connection is closed (1008). The margin above max_queued_bytes leaves room
  /// for the last frames of streams cut at that limit.
  static constexpr size_t max_ws_queued_bytes = max_queued_bytes + (1 << 20);
};

struct server_context {
  server_context(actors::engine& e, const engine_config& c);
  ~server_context();

  actors::engine& engine;
  engine_config config;
  std::string model_name;
  int64_t max_model_len = 0;
  int64_t created = 0;                       ///< start time (unix seconds), for /v1/models
  metrics stats;
  std::unique_ptr<prompt_builder> prompts;
  /// generation_config.json's sampling defaults (empty with --generation-config vllm).
  generation_defaults sampling_defaults;
  std::atomic<int64_t> num_connections{0};
  std::atomic<int64_t> num_active_jobs{0};   ///< API requests between submit and last byte
  std::atomic<bool> draining{false};
  /// connection_limits::header_timeout; tests lower it before connecting.
  std::atomic<int64_t> header_timeout_ms{connection_limits::header_timeout.count()};
  /// Runs work that must not hold an I/O thread (request parsing, chat templates, tokenization):
  /// the server's prompt pool (--prompt-threads); inline until the server sets it.
  std::function<void(std::function<void()>)> run_off_io = [](std::function<void()> f) { f(); };

  /// "<prefix>-<process nonce><counter>", unique within the process and across restarts.
  std::string new_request_id(std::string_view prefix);

 private:
  std::atomic<uint64_t> next_id_{0};
  uint64_t nonce_ = 0;
};

/// Constant-time check of an `Authorization` header value against "Bearer <key>".
bool authorized(std::string_view header_value, std::string_view api_key);

}  // namespace actorserve::server
