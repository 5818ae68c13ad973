#include "bench/storm/abort_ws.hpp"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

namespace actorserve::bench::storm {
namespace {

namespace websocket = beast::websocket;
using ws_stream = websocket::stream<beast::tcp_stream>;

std::string request_frame(const storm_options& o, const stream_plan& p, int k) {
  return fmt::format(R"({{"type":"completions","id":"r{}","body":{}}})", k,
                     completion_body(o.model, p.prompt, p.max_tokens, true));
}

/// True when `frame` is the done or error frame of request `k`.
bool ends(const std::string& frame, int k) {
  const std::string id = fmt::format("\"id\":\"r{}\"", k);
  return frame.find(id) != std::string::npos &&
         (frame.find("\"type\":\"done\"") != std::string::npos || frame.find("\"type\":\"error\"") != std::string::npos);
}

/// Sends cancel frames for the open requests and reads until each is answered (done/error).
asio::awaitable<void> cancel_all(ws_stream& ws, std::vector<bool>& open, beast::flat_buffer& buf, abort_tally& t) {
  int64_t pending = 0;
  for (size_t k = 0; k < open.size(); ++k) {
    if (!open[k]) continue;
    auto [ec, n] = co_await ws.async_write(asio::buffer(fmt::format(R"({{"type":"cancel","id":"r{}"}})", k)), nothrow);
    if (ec) co_return t.note_error("ws cancel write: " + ec.message());
    ++t.ws_cancelled;
    ++pending;
  }
  while (pending > 0) {
    buf.clear();
    auto [ec, n] = co_await ws.async_read(buf, nothrow);
    if (ec) co_return t.note_error("ws read after cancel: " + ec.message());
    const std::string frame = beast::buffers_to_string(buf.data());
    for (size_t k = 0; k < open.size(); ++k)
      if (open[k] && ends(frame, static_cast<int>(k))) {
        open[k] = false;
        ++t.ws_cancel_acked;
        --pending;
      }
  }
  auto [cec] = co_await ws.async_close(websocket::close_code::normal, nothrow);
  (void)cec;  // the server may already have closed; the cancel acknowledgements were the check
}

void drop(ws_stream& ws, cut_style how) {
  beast::error_code ec;
  auto& s = ws.next_layer().socket();
  if (how == cut_style::rst) s.set_option(asio::socket_base::linger(true, 0), ec);
  else s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
}

}  // namespace

asio::awaitable<void> ws_streams(tcp::endpoint ep, const storm_options& o, const stream_plan& p, abort_tally& t) {
  ws_stream ws(co_await asio::this_coro::executor);
  ws.next_layer().expires_after(std::chrono::seconds(30));
  auto [cec] = co_await ws.next_layer().async_connect(ep, nothrow);
  if (cec) co_return t.note_error("ws connect: " + cec.message());
  auto [hec] = co_await ws.async_handshake("127.0.0.1", "/v1/stream", nothrow);
  if (hec) co_return t.note_error("ws handshake: " + hec.message());
  ws.next_layer().expires_never();
  ws.set_option(websocket::stream_base::timeout{std::chrono::seconds(30), std::chrono::seconds(60), false});
  ws.text(true);
  std::vector<bool> open(static_cast<size_t>(p.requests), true);
  for (int k = 0; k < p.requests; ++k) {
    auto [ec, n] = co_await ws.async_write(asio::buffer(request_frame(o, p, k)), nothrow);
    if (ec) co_return t.note_error("ws write: " + ec.message());
  }
  beast::flat_buffer buf;
  if (p.mid_prefill) {
    if (p.delay_us > 0) co_await sleep_for(std::chrono::microseconds(p.delay_us));
    t.cut_prefill += p.requests;
    if (p.how == cut_style::cancel) co_await cancel_all(ws, open, buf, t);
    else drop(ws, p.how);
    co_return;
  }
  int64_t deltas = 0;
  int still_open = p.requests;
  while (still_open > 0) {
    buf.clear();
    auto [ec, n] = co_await ws.async_read(buf, nothrow);
    if (ec) co_return t.note_error("ws read: " + ec.message());
    const std::string frame = beast::buffers_to_string(buf.data());
    if (frame.find("\"type\":\"error\"") != std::string::npos) co_return t.note_error("ws error frame: " + frame.substr(0, 200));
    if (frame.find("\"type\":\"delta\"") != std::string::npos) ++deltas;
    for (int k = 0; k < p.requests; ++k)
      if (open[static_cast<size_t>(k)] && ends(frame, k)) {
        open[static_cast<size_t>(k)] = false;
        --still_open;
        ++t.finished_before_cut;
      }
    if (still_open > 0 && deltas >= p.cut_after) {
      t.cut_decode += still_open;
      if (p.how == cut_style::cancel) co_await cancel_all(ws, open, buf, t);
      else drop(ws, p.how);
      co_return;
    }
  }
  auto [clec] = co_await ws.async_close(websocket::close_code::normal, nothrow);
  (void)clec;
}

asio::awaitable<ws_probe_result> ws_probe(tcp::endpoint ep, std::string payload, std::chrono::milliseconds timeout) {
  ws_probe_result r;
  ws_stream ws(co_await asio::this_coro::executor);
  ws.next_layer().expires_after(timeout);
  auto [cec] = co_await ws.next_layer().async_connect(ep, nothrow);
  if (cec) co_return r;
  auto [hec] = co_await ws.async_handshake("127.0.0.1", "/v1/stream", nothrow);
  if (hec) co_return r;
  r.handshake_ok = true;
  ws.text(true);
  ws.next_layer().expires_after(timeout);
  auto [wec, wn] = co_await ws.async_write(asio::buffer(payload), nothrow);
  beast::flat_buffer buf;
  auto [rec, rn] = co_await ws.async_read(buf, nothrow);
  if (!rec) r.first_frame = beast::buffers_to_string(buf.data());
  else r.closed = rec != beast::error::timeout;
  if (wec && rec) r.closed = true;
  beast::error_code ec;
  ws.next_layer().socket().close(ec);
  co_return r;
}

}  // namespace actorserve::bench::storm
