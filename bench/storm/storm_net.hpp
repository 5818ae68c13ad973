#pragma once
/// The storms' network helpers (Asio/Beast, C++20 coroutines). Private to bench/storm/*.cpp:
/// it includes Asio, which must not reach other headers.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/storm/storm.hpp"

namespace actorserve::bench::storm {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
inline constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

/// A whole HTTP response; status 0 and `error` set on a network failure.
struct http_reply {
  int status = 0;
  std::string body;
  std::string error;
};

tcp::endpoint endpoint_of(const storm_options& o);

/// One HTTP/1.1 connection reused across requests (reconnects after a close).
class keepalive_client {
 public:
  explicit keepalive_client(tcp::endpoint ep) : ep_(ep) {}
  /// Sends `method target` with a JSON body (if any) and reads the whole response.
  asio::awaitable<http_reply> call(std::string method, std::string target, std::string body,
                                   std::chrono::milliseconds timeout);

 private:
  tcp::endpoint ep_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

/// A blocking request on its own connection (for /metrics, /health and probes between phases).
http_reply blocking_call(tcp::endpoint ep, const std::string& method, const std::string& target,
                         const std::string& body = {}, std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// Scrapes /metrics.
server_metrics scrape(tcp::endpoint ep);
/// Polls /metrics until `done` holds or `timeout` passes; returns the last scrape.
server_metrics wait_for(tcp::endpoint ep, std::chrono::milliseconds timeout,
                        const std::function<bool(const server_metrics&)>& done);
/// True when the engine holds nothing: no request running, waiting or alive, no KV block used.
bool engine_quiet(const server_metrics& m);

/// A /v1/completions body for token-id prompts (greedy, ignore_eos, token ids returned).
std::string completion_body(const std::string& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                            bool stream);
/// Every `"token_ids":[...]` array in `body`, concatenated (prompt_token_ids is not matched).
std::vector<int32_t> token_ids_in(std::string_view body);
/// The status code of the first HTTP status line in `bytes`, or 0.
int status_of(std::string_view bytes);

/// Suspends the calling coroutine for `d`.
asio::awaitable<void> sleep_for(clock_type::duration d);
/// Runs `ioc` until it runs out of work or `limit` passes; true when the limit was hit.
bool run_for(asio::io_context& ioc, std::chrono::duration<double> limit);

}  // namespace actorserve::bench::storm
