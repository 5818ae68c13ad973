#pragma once
/// The WebSocket endpoint GET /v1/stream (protocol: docs/websocket.md). Its own TU: Beast's
/// WebSocket code is the most expensive to compile.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace actorserve::server {

struct server_context;

/// What the WebSocket handshake reads first: the upgrade request's handshake headers followed
/// by `early`, the bytes the client sent after the request (its first frames). nullopt when they
/// do not fit the handshake's read buffer.
std::optional<std::string> ws_handshake_bytes(const boost::beast::http::request<boost::beast::http::string_body>& upgrade,
                                              std::string_view early);

/// Takes over an accepted connection whose request asked for the WebSocket upgrade;
/// `handshake` comes from ws_handshake_bytes.
void launch_ws_connection(boost::asio::ip::tcp::socket&& socket, std::string handshake, server_context& ctx);

}  // namespace actorserve::server
