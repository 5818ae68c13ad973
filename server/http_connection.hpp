#pragma once
/// One HTTP/1.1 connection: reads requests, routes them, writes whole responses or SSE streams.
#include <boost/asio/ip/tcp.hpp>

namespace actorserve::server {

struct server_context;

/// Starts serving an accepted connection (its executor must be a strand).
void launch_http_connection(boost::asio::ip::tcp::socket&& socket, server_context& ctx);

}  // namespace actorserve::server
