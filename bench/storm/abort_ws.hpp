#pragma once
/// The abort storm's plans and tallies, and its WebSocket side (in its own TU: Beast's WebSocket
/// code is the slowest to compile). Private to bench/storm/.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/storm/storm_net.hpp"

namespace actorserve::bench::storm {

/// How a stream is cut: FIN (shutdown + close), RST (linger 0), or WebSocket cancel frames
/// followed by a clean close.
enum class cut_style { fin = 0, rst = 1, cancel = 2 };

/// One SSE stream, or one WebSocket connection carrying `requests` streams.
struct stream_plan {
  bool websocket = false;
  bool mid_prefill = false;     ///< cut `delay_us` after sending (long prompt); else after `cut_after` deltas
  cut_style how = cut_style::fin;
  int64_t prompt_len = 0, max_tokens = 0, cut_after = 0, delay_us = 0;
  int requests = 1;
  std::vector<int32_t> prompt;
};

/// What the clients saw (one thread: plain counters).
struct abort_tally {
  int64_t planned = 0, streams_done = 0;
  int64_t cut_prefill = 0, cut_decode = 0, finished_before_cut = 0;
  int64_t ws_cancelled = 0, ws_cancel_acked = 0;
  int64_t probes = 0, probes_failed = 0;
  int64_t errors = 0;
  std::string first_error;
  void note_error(const std::string& what);
};

/// Opens a WebSocket on /v1/stream, starts `p.requests` streams and cuts them as planned.
asio::awaitable<void> ws_streams(tcp::endpoint ep, const storm_options& o, const stream_plan& p, abort_tally& t);

/// What a hostile WebSocket client saw: the first frame the server sent, or that it closed.
struct ws_probe_result {
  bool handshake_ok = false;
  bool closed = false;          ///< the server closed (or reset) the connection
  std::string first_frame;      ///< empty when none came before the close or the timeout
};

/// Upgrades, sends `payload` as one text frame, and waits up to `timeout` for a frame or a close.
asio::awaitable<ws_probe_result> ws_probe(tcp::endpoint ep, std::string payload, std::chrono::milliseconds timeout);

}  // namespace actorserve::bench::storm
