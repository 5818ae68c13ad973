#include "bench/common/serving_client.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

namespace actorserve::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
constexpr size_t read_chunk = 16 * 1024;

/// What every coroutine shares (one thread: no locks).
struct client {
  asio::io_context ioc;
  serving_options opts;
  std::string extra_members;  ///< opts.extra_body as ",<members>" (see extra_body_members)
  tcp::resolver::results_type endpoints;
  clock_type::time_point start;
  std::vector<request_outcome> outcomes;
  int64_t in_flight = 0, peak = 0;
  size_t num_done = 0;
  bool hit_limit = false;
  std::unique_ptr<asio::steady_timer> slot_freed;   ///< cancelled whenever a request ends
  std::unique_ptr<asio::steady_timer> limit;        ///< the duration limit; cancelled when all are done

  double now() const { return std::chrono::duration<double>(clock_type::now() - start).count(); }
  std::chrono::steady_clock::duration idle() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(opts.idle_timeout_s));
  }
};

http::request<http::string_body> make_request(const client& c, http::verb verb, const std::string& target,
                                              std::string body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, c.opts.host);
  req.set(http::field::user_agent, "actorserve-bench");
  if (!c.opts.api_key.empty()) req.set(http::field::authorization, "Bearer " + c.opts.api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = std::move(body);
  }
  req.prepare_payload();
  return req;
}

/// GET `target`; the status (0 on a network error) and body.
asio::awaitable<std::pair<int, std::string>> simple_get(client& c, std::string target) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(std::chrono::seconds(10));
  auto [ec, ep] = co_await stream.async_connect(c.endpoints, nothrow);
  if (ec) co_return std::pair<int, std::string>{0, ec.message()};
  auto req = make_request(c, http::verb::get, target, {});
  auto [wec, wn] = co_await http::async_write(stream, req, nothrow);
  if (wec) co_return std::pair<int, std::string>{0, wec.message()};
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  auto [rec, rn] = co_await http::async_read(stream, buf, res, nothrow);
  if (rec) co_return std::pair<int, std::string>{0, rec.message()};
  co_return std::pair<int, std::string>{static_cast<int>(res.result_int()), res.body()};
}

std::optional<int64_t> find_int_after(std::string_view text, std::string_view key) {
  const size_t pos = text.find(key);
  if (pos == std::string_view::npos) return std::nullopt;
  const char* p = text.data() + pos + key.size();
  const char* end = text.data() + text.size();
  while (p < end && *p == ' ') ++p;
  int64_t v = 0;
  auto [ptr, err] = std::from_chars(p, end, v);
  if (err != std::errc{}) return std::nullopt;
  return v;
}

std::string completion_body(const client& c, const serving_request& r) {
  std::string ids;
  ids.reserve(r.prompt_ids.size() * 7);
  for (size_t i = 0; i < r.prompt_ids.size(); ++i) fmt::format_to(std::back_inserter(ids), "{}{}", i ? "," : "", r.prompt_ids[i]);
  return fmt::format(R"({{"model":"{}","prompt":[{}],"max_tokens":{},"temperature":{},"stream":true,)"
                     R"("stream_options":{{"include_usage":true}},"ignore_eos":true{}}})",
                     c.opts.model, ids, r.max_tokens, c.opts.temperature, c.extra_members);
}

/// Sends one streamed completion and times its chunks into `out`.
asio::awaitable<void> stream_completion(client& c, const serving_request& r, request_outcome& out) {
  out.prompt_len = static_cast<int64_t>(r.prompt_ids.size());
  out.start_s = c.now();
  auto fail = [&](std::string why) {
    out.success = false;
    out.error = std::move(why);
  };
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(c.idle());
  auto [ec, ep] = co_await stream.async_connect(c.endpoints, nothrow);
  if (ec) co_return fail("connect: " + ec.message());
  stream.socket().set_option(tcp::no_delay(true), ec);
  auto req = make_request(c, http::verb::post, "/v1/completions", completion_body(c, r));
  stream.expires_after(c.idle());
  auto [wec, wn] = co_await http::async_write(stream, req, nothrow);
  if (wec) co_return fail("write: " + wec.message());
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(c.idle());
  auto [hec, hn] = co_await http::async_read_header(stream, buf, parser, nothrow);
  if (hec) co_return fail("read header: " + hec.message());
  const int status = static_cast<int>(parser.get().result_int());
  std::vector<char> chunk(read_chunk);
  sse_reader sse;
  std::string error_body;
  double last = -1;
  int64_t chunks = 0;
  std::optional<int64_t> usage_tokens;
  bool done = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    stream.expires_after(c.idle());
    auto [rec, rn] = co_await http::async_read_some(stream, buf, parser, nothrow);
    if (rec && rec != http::error::need_buffer) co_return fail("read: " + rec.message());
    const size_t got = chunk.size() - parser.get().body().size;
    const double t = c.now() - out.start_s;
    if (status != 200) {
      error_body.append(chunk.data(), got);
      continue;
    }
    for (const std::string& data : sse.feed(std::string_view(chunk.data(), got))) {
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      if (data.rfind("{\"error\"", 0) == 0) co_return fail("server: " + data.substr(0, 300));
      if (auto n = find_int_after(data, "\"completion_tokens\":")) usage_tokens = n;
      if (data.find("\"choices\":[]") != std::string::npos || data.find("\"text\":") == std::string::npos) continue;
      ++chunks;
      if (last < 0) out.ttft_s = t;
      else out.itl_s.push_back(t - last);
      last = t;
    }
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (status != 200) co_return fail(fmt::format("HTTP {}: {}", status, error_body.substr(0, 300)));
  if (!done) co_return fail("stream ended without [DONE]");
  out.latency_s = c.now() - out.start_s;
  out.output_tokens = usage_tokens.value_or(chunks);
  out.success = chunks > 0;
  if (!out.success) out.error = "no tokens streamed";
}

/// One request's life: runs it, frees its concurrency slot.
asio::awaitable<void> run_one(client& c, const serving_request& r, size_t index) {
  co_await stream_completion(c, r, c.outcomes[index]);
  --c.in_flight;
  c.slot_freed->cancel();
  if (++c.num_done == c.outcomes.size()) c.limit->cancel();
}

/// Ends the run at the duration limit, abandoning what is still in flight.
asio::awaitable<void> enforce_limit(client& c) {
  c.limit->expires_after(std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(c.opts.duration_limit_s)));
  auto [ec] = co_await c.limit->async_wait(nothrow);
  if (ec) co_return;
  c.hit_limit = true;
  c.ioc.stop();
}

/// Launches the requests at their arrival times, each once a concurrency slot is free.
asio::awaitable<void> launch_all(client& c, const std::vector<serving_request>& requests) {
  auto exec = co_await asio::this_coro::executor;
  asio::steady_timer timer(exec);
  std::mt19937_64 rng(c.opts.seed);
  const double rate = c.opts.request_rate;
  std::gamma_distribution<double> gap(c.opts.burstiness, 1.0 / (rate * c.opts.burstiness));
  auto next = clock_type::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    while (c.opts.max_concurrency > 0 && c.in_flight >= c.opts.max_concurrency) {
      c.slot_freed->expires_at(clock_type::time_point::max());
      co_await c.slot_freed->async_wait(nothrow);
    }
    ++c.in_flight;
    c.peak = std::max(c.peak, c.in_flight);
    asio::co_spawn(exec, run_one(c, requests[i], i), asio::detached);
    if (std::isfinite(rate) && rate > 0) {
      next += std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(gap(rng)));
      timer.expires_at(next);
      co_await timer.async_wait(nothrow);
    }
  }
}

/// Health wait, model discovery and an untimed test request; the error ends the benchmark.
asio::awaitable<std::optional<error>> prepare(client& c, const serving_request& probe) {
  const auto give_up = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                               std::chrono::duration<double>(c.opts.wait_for_server_s));
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    auto [status, body] = co_await simple_get(c, "/health");
    if (status == 200) break;
    const bool server_gone = c.opts.server_pid > 0 && ::kill(static_cast<pid_t>(c.opts.server_pid), 0) != 0;
    if (clock_type::now() >= give_up || server_gone)
      co_return make_error(error_code::unavailable,
                           fmt::format("server {}:{} not healthy{}: {} {}", c.opts.host, c.opts.port,
                                       server_gone ? " (its process exited)" : "", status, body.substr(0, 200)));
    timer.expires_after(std::chrono::milliseconds(500));
    co_await timer.async_wait(nothrow);
  }
  if (c.opts.model.empty()) {
    auto [status, body] = co_await simple_get(c, "/v1/models");
    const size_t pos = body.find("\"id\":\"");
    if (status != 200 || pos == std::string::npos)
      co_return make_error(error_code::unavailable, "GET /v1/models: no model id in the reply");
    const size_t begin = pos + 6;
    c.opts.model = body.substr(begin, body.find('"', begin) - begin);
  }
  request_outcome test;
  c.start = clock_type::now();
  co_await stream_completion(c, probe, test);
  if (!test.success) co_return make_error(error_code::unavailable, "test request failed: " + test.error);
  co_return std::nullopt;
}

}  // namespace

std::vector<std::string> sse_reader::feed(std::string_view bytes) {
  for (char ch : bytes)
    if (ch != '\r') buffer_ += ch;
  std::vector<std::string> out;
  size_t end = 0;
  while ((end = buffer_.find("\n\n")) != std::string::npos) {
    std::string_view event(buffer_.data(), end);
    size_t line_start = 0;
    while (line_start <= event.size()) {
      size_t line_end = event.find('\n', line_start);
      if (line_end == std::string_view::npos) line_end = event.size();
      std::string_view line = event.substr(line_start, line_end - line_start);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        out.emplace_back(line);
      }
      line_start = line_end + 1;
    }
    buffer_.erase(0, end + 2);
  }
  return out;
}

result<std::string> extra_body_members(std::string_view extra_body) {
  const auto bad = [](std::string_view why) {
    return make_error(error_code::invalid_argument, fmt::format("--extra-body: {}", why));
  };
  if (extra_body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::string();
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(extra_body.data(), extra_body.size()).get(obj) != simdjson::SUCCESS)
    return bad("expected one JSON object, e.g. '{\"response_format\": {\"type\": \"json_object\"}}'");
  static constexpr std::string_view own[] = {"model", "prompt", "max_tokens", "temperature", "stream",
                                             "stream_options", "ignore_eos"};
  for (auto field : obj)
    if (std::find(std::begin(own), std::end(own), field.key) != std::end(own))
      return bad(fmt::format("'{}' is set by the benchmark itself (see its own options)", field.key));
  const std::string text = simdjson::minify(obj);  // "{...}": its members go after the body's own
  return text.size() > 2 ? "," + text.substr(1, text.size() - 2) : std::string();
}

result<serving_run> run_serving(const serving_options& opts, const std::vector<serving_request>& requests) {
  auto c = std::make_unique<client>();
  c->opts = opts;
  auto extra = extra_body_members(opts.extra_body);
  if (!extra) return extra.err();
  c->extra_members = std::move(extra.value());
  c->slot_freed = std::make_unique<asio::steady_timer>(c->ioc);
  c->limit = std::make_unique<asio::steady_timer>(c->ioc);
  beast::error_code ec;
  tcp::resolver resolver(c->ioc);
  c->endpoints = resolver.resolve(opts.host, std::to_string(opts.port), ec);
  if (ec) return make_error(error_code::invalid_argument, fmt::format("--host {}: {}", opts.host, ec.message()));
  if (requests.empty()) return make_error(error_code::invalid_argument, "--num-prompts: no requests");
  std::optional<error> failure;
  serving_request probe = requests.front();
  probe.max_tokens = std::min(probe.max_tokens, 8);
  asio::co_spawn(c->ioc, prepare(*c, probe), [&](std::exception_ptr e, std::optional<error> err) {
    if (e) failure = make_error(error_code::internal, "client: unexpected exception");
    else failure = std::move(err);
  });
  c->ioc.run();
  if (failure) return *failure;
  c->ioc.restart();
  c->outcomes.assign(requests.size(), request_outcome{});
  c->start = clock_type::now();
  asio::co_spawn(c->ioc, launch_all(*c, requests), asio::detached);
  if (opts.duration_limit_s > 0) asio::co_spawn(c->ioc, enforce_limit(*c), asio::detached);
  c->ioc.run();
  serving_run run;
  run.model = c->opts.model;
  run.peak_concurrency = c->peak;
  run.hit_duration_limit = c->hit_limit;
  for (auto& o : c->outcomes) {
    run.duration_s = std::max(run.duration_s, o.start_s + o.latency_s);
    if (c->hit_limit && !o.success && o.error.empty()) o.error = "unfinished at the duration limit";
  }
  if (c->hit_limit) run.duration_s = opts.duration_limit_s;
  run.outcomes = std::move(c->outcomes);
  return run;
}

}  // namespace actorserve::bench
