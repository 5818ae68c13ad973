#pragma once
/// The WebSocket endpoint GET /v1/stream (protocol: docs/websocket.md). Its own TU: Beast's
/// WebSocket code is the most expensive to compile.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace actorserve::server {

struct server_context;

/// Takes over an accepted connection whose request asked for the WebSocket upgrade.
void launch_ws_session(boost::asio::ip::tcp::socket&& socket,
                       boost::beast::http::request<boost::beast::http::string_body>&& upgrade,
                       server_context& ctx);

}  // namespace actorserve::server
