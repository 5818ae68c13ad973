#include "bench/storm/storm_net.hpp"

#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <charconv>
#include <thread>

namespace actorserve::bench::storm {
namespace {

namespace http = beast::http;

http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                              std::string body) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::user_agent, "bench-storm");
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  return req;
}

}  // namespace

tcp::endpoint endpoint_of(const storm_options& o) {
  return tcp::endpoint(asio::ip::make_address(o.host), static_cast<uint16_t>(o.port));
}

asio::awaitable<http_reply> keepalive_client::call(std::string method, std::string target, std::string body,
                                                   std::chrono::milliseconds timeout) {
  http_reply out;
  if (!stream_) {
    stream_.emplace(co_await asio::this_coro::executor);
    buffer_.clear();
    stream_->expires_after(timeout);
    auto [ec] = co_await stream_->async_connect(ep_, nothrow);
    if (ec) {
      stream_.reset();
      out.error = "connect: " + ec.message();
      co_return out;
    }
    stream_->socket().set_option(tcp::no_delay(true), ec);
  }
  auto req = make_request(method, target, std::move(body));
  stream_->expires_after(timeout);
  auto [wec, wn] = co_await http::async_write(*stream_, req, nothrow);
  if (wec) {
    stream_.reset();
    out.error = "write: " + wec.message();
    co_return out;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  auto [rec, rn] = co_await http::async_read(*stream_, buffer_, parser, nothrow);
  if (rec) {
    stream_.reset();
    out.error = "read: " + rec.message();
    co_return out;
  }
  out.status = static_cast<int>(parser.get().result_int());
  const bool keep = parser.get().keep_alive();
  out.body = std::move(parser.get().body());
  if (!keep) stream_.reset();
  co_return out;
}

http_reply blocking_call(tcp::endpoint ep, const std::string& method, const std::string& target,
                         const std::string& body, std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  http_reply out;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        keepalive_client c(ep);
        out = co_await c.call(method, target, body, timeout);
      },
      asio::detached);
  ioc.run();
  return out;
}

server_metrics scrape(tcp::endpoint ep) {
  server_metrics m;
  const http_reply r = blocking_call(ep, "GET", "/metrics", {}, std::chrono::seconds(10));
  if (r.status != 200) return m;
  m.ok = true;
  std::string_view text = r.body;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    constexpr std::string_view prefix = "actorserve:";
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    double v = 0;
    const std::string_view num = line.substr(space + 1);
    if (std::from_chars(num.data(), num.data() + num.size(), v).ec != std::errc{}) continue;
    // The key: the series name and its labels but model_name (on every series).
    std::string key(line.substr(prefix.size(), space - prefix.size()));
    if (const size_t at = key.find("model_name=\""); at != std::string::npos) {
      const size_t end = key.find('"', at + 12);
      size_t cut_end = end == std::string::npos ? key.size() : end + 1;
      if (cut_end < key.size() && key[cut_end] == ',') ++cut_end;
      key.erase(at, cut_end - at);
      if (const size_t empty = key.find("{}"); empty != std::string::npos) key.erase(empty, 2);
    }
    m.values[key] = v;
  }
  return m;
}

server_metrics wait_for(tcp::endpoint ep, std::chrono::milliseconds timeout,
                        const std::function<bool(const server_metrics&)>& done) {
  const auto give_up = clock_type::now() + timeout;
  for (;;) {
    server_metrics m = scrape(ep);
    if ((m.ok && done(m)) || clock_type::now() >= give_up) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool engine_quiet(const server_metrics& m) {
  return m.ok && m.get("num_requests_running") == 0 && m.get("num_requests_waiting") == 0 &&
         m.get("kv_blocks_used") == 0 && m.get("engine_requests_alive") == 0 && m.get("active_jobs") == 0;
}

std::string completion_body(const std::string& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                            bool stream) {
  std::string ids;
  ids.reserve(prompt.size() * 5);
  for (size_t i = 0; i < prompt.size(); ++i) fmt::format_to(std::back_inserter(ids), "{}{}", i ? "," : "", prompt[i]);
  return fmt::format(R"({{"model":"{}","prompt":[{}],"max_tokens":{},"temperature":0,"ignore_eos":true,)"
                     R"("return_token_ids":true,"stream":{}}})",
                     model, ids, max_tokens, stream ? "true" : "false");
}

std::vector<int32_t> token_ids_in(std::string_view body) {
  std::vector<int32_t> out;
  constexpr std::string_view key = "\"token_ids\":[";
  size_t pos = 0;
  while ((pos = body.find(key, pos)) != std::string_view::npos) {
    pos += key.size();
    while (pos < body.size() && body[pos] != ']') {
      int32_t v = 0;
      auto [p, ec] = std::from_chars(body.data() + pos, body.data() + body.size(), v);
      if (ec != std::errc{}) break;
      out.push_back(v);
      pos = static_cast<size_t>(p - body.data());
      if (pos < body.size() && body[pos] == ',') ++pos;
    }
  }
  return out;
}

int status_of(std::string_view bytes) {
  if (bytes.rfind("HTTP/1.", 0) != 0 || bytes.size() < 12) return 0;
  int v = 0;
  std::from_chars(bytes.data() + 9, bytes.data() + 12, v);
  return v;
}

asio::awaitable<void> sleep_for(clock_type::duration d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(nothrow);
}

bool run_for(asio::io_context& ioc, std::chrono::duration<double> limit) {
  ioc.run_for(std::chrono::duration_cast<std::chrono::milliseconds>(limit));
  if (ioc.stopped()) return false;
  ioc.stop();
  return true;
}

}  // namespace actorserve::bench::storm
