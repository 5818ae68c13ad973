// Hostile clients: slowloris (headers and bodies dribbled byte by byte), oversized headers and
// bodies, malformed HTTP, invalid UTF-8 and deeply nested JSON (HTTP and WebSocket), and
// thousands of idle connections, all at once beside well-behaved clients. Every hostile client
// must get its limit (the expected 4xx, or the connection closed within the server's deadline),
// and the well-behaved clients' latency must stay within a stated bound of an undisturbed run.
#include <fmt/format.h>

#include <functional>
#include <map>

#include "bench/storm/abort_ws.hpp"
#include "bench/storm/storm_net.hpp"

namespace actorserve::bench::storm {
namespace {

using ms_t = std::chrono::milliseconds;

/// Per kind of hostile client: how many got their limit, and what the others got instead.
struct kind_tally {
  int64_t sent = 0, limited = 0;
  std::vector<double> close_s;     ///< time to the close, for dribbling and idle clients
  std::string first_bad;
};
using tally_map = std::map<std::string, kind_tally>;

void note(tally_map& t, const std::string& kind, bool limited, const std::string& got, double close_s = -1) {
  auto& k = t[kind];
  ++k.sent;
  if (limited) ++k.limited;
  else if (k.first_bad.empty()) k.first_bad = got;
  if (close_s >= 0) k.close_s.push_back(close_s);
}

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// Sends `bytes` on a fresh connection (a write failure is fine: the server may refuse early),
/// then reads until the server closes or `timeout`. Returns what came back and whether it closed.
asio::awaitable<std::pair<std::string, bool>> exchange(tcp::endpoint ep, std::string bytes, ms_t timeout) {
  tcp::socket s(co_await asio::this_coro::executor);
  auto [cec] = co_await s.async_connect(ep, nothrow);
  if (cec) co_return std::pair<std::string, bool>{"connect: " + cec.message(), false};
  asio::steady_timer guard(s.get_executor());
  bool timed_out = false;
  guard.expires_after(timeout);
  guard.async_wait([&](beast::error_code ec) {
    if (ec) return;
    timed_out = true;
    s.close(ec);
  });
  co_await asio::async_write(s, asio::buffer(bytes), nothrow);
  std::string got;
  std::array<char, 4096> buf{};
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), nothrow);
    got.append(buf.data(), n);
    if (ec) break;
  }
  guard.cancel();
  co_return std::pair<std::string, bool>{got, !timed_out};
}

/// A one-shot hostile request whose answer must be `want` (0: any 4xx, or a close without answer).
asio::awaitable<void> one_shot(tcp::endpoint ep, tally_map& t, std::string kind, std::string bytes, int want,
                               ms_t timeout) {
  auto [got, closed] = co_await exchange(ep, std::move(bytes), timeout);
  const int status = status_of(got);
  const bool ok = want != 0 ? status == want : ((status >= 400 && status < 500) || (status == 0 && closed));
  note(t, kind, ok && closed, fmt::format("status {} closed {}: {}", status, closed, got.substr(0, 160)));
}

/// Sends `head` then one byte of `drip` every 200 ms until the server closes the connection.
asio::awaitable<void> dribble(tcp::endpoint ep, tally_map& t, std::string kind, std::string head, ms_t bound) {
  const auto t0 = clock_type::now();
  tcp::socket s(co_await asio::this_coro::executor);
  auto [cec] = co_await s.async_connect(ep, nothrow);
  if (cec) co_return note(t, kind, false, "connect: " + cec.message());
  bool closed = false;
  std::string got;
  // The reader notices the close; the writer dribbles until then.
  asio::co_spawn(
      s.get_executor(),
      [&]() -> asio::awaitable<void> {
        std::array<char, 1024> buf{};
        for (;;) {
          auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), nothrow);
          got.append(buf.data(), n);
          if (ec) break;
        }
        closed = true;
      },
      asio::detached);
  co_await asio::async_write(s, asio::buffer(head), nothrow);
  while (!closed && clock_type::now() - t0 < bound) {
    co_await sleep_for(ms_t(200));
    if (closed) break;
    co_await asio::async_write(s, asio::buffer("a", 1), nothrow);
  }
  const double secs = since(t0);
  const int status = status_of(got);
  beast::error_code ec;
  s.close(ec);
  while (!closed) co_await sleep_for(ms_t(10));  // the reader's frame refers to `s` and `got`
  note(t, kind, secs < std::chrono::duration<double>(bound).count() && (status == 0 || (status >= 400 && status < 500)),
       fmt::format("after {:.1f} s: status {} {}", secs, status, got.substr(0, 120)), secs);
}

/// An idle connection: connects, sends nothing, and must be closed within `bound`.
asio::awaitable<void> idle_connection(tcp::endpoint ep, tally_map& t, ms_t bound, int64_t& connecting) {
  const auto t0 = clock_type::now();
  tcp::socket s(co_await asio::this_coro::executor);
  auto [cec] = co_await s.async_connect(ep, nothrow);
  --connecting;
  if (cec) co_return note(t, "idle connection", false, "connect: " + cec.message());
  asio::steady_timer guard(s.get_executor());
  bool timed_out = false;
  guard.expires_after(bound);
  guard.async_wait([&](beast::error_code ec) {
    if (ec) return;
    timed_out = true;
    s.close(ec);
  });
  std::array<char, 256> buf{};
  std::string got;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), nothrow);
    got.append(buf.data(), n);
    if (ec) break;
  }
  guard.cancel();
  note(t, "idle connection", !timed_out && got.empty(), timed_out ? "still open at the bound" : got.substr(0, 100),
       since(t0));
}

std::string post(std::string_view target, std::string_view body, std::string_view extra = "") {
  return fmt::format("POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}Content-Length: "
                     "{}\r\n\r\n{}",
                     target, extra, body.size(), body);
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

/// Launches every hostile client (`n` of each one-shot kind); returns how many there are.
int64_t launch_hostiles(asio::io_context& ioc, tcp::endpoint ep, const storm_options& o, tally_map& t, int64_t& connecting) {
  const ms_t bound = std::chrono::duration_cast<ms_t>(std::chrono::duration<double>(o.server_deadline_s + 5));
  const ms_t quick(15000);
  const int64_t n = std::max<int64_t>(1, o.slowloris / 4);
  std::vector<std::tuple<std::string, std::string, int>> shots{
      {"oversized header (64 KiB)", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n", 431},
      {"oversized body (Content-Length 16 MiB)",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16777216\r\n\r\n" +
           std::string(64 << 10, ' '), 413},
      {"oversized chunked body",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
           [] { std::string s; for (int i = 0; i < 9; ++i) s += "100000\r\n" + std::string(1 << 20, ' ') + "\r\n"; return s; }(),
       413},
      {"malformed request line", "GARBAGE\r\n\r\n", 0},
      {"malformed binary", std::string("\x00\x01\x02\xff\xfe\r\n\r\n", 9), 0},
      {"malformed header line", "GET /health HTTP/1.1\r\nNoColonHere\r\n\r\n", 0},
      {"malformed Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 0},
      {"malformed chunk size", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n\r\n", 0},
      {"unknown HTTP version", "GET /health HTTP/7.3\r\nHost: x\r\n\r\n", 0},
      {"request line of 64 KiB", "GET /" + std::string(64 << 10, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 0},
      {"invalid UTF-8 in JSON", post("/v1/completions", "{\"model\":\"m\",\"prompt\":\"\xff\xfe\xc0\xaf\",\"max_tokens\":4}",
                                     "Connection: close\r\n"), 400},
      {"invalid UTF-8 in chat JSON",
       post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xed\xa0\x80z\"}],\"max_tokens\":4}",
            "Connection: close\r\n"), 400},
      {"deeply nested JSON (100k levels)", post("/v1/completions", "{\"prompt\":\"a\",\"x\":" + nested(100000) + "}",
                                                "Connection: close\r\n"), 400},
      {"deeply nested JSON document", post("/v1/completions", nested(50000), "Connection: close\r\n"), 400},
      {"deeply nested prompt", post("/v1/completions", "{\"prompt\":" + nested(2000) + "}", "Connection: close\r\n"), 400},
  };
  for (int64_t i = 0; i < n; ++i)
    for (const auto& [kind, bytes, want] : shots)
      asio::co_spawn(ioc, one_shot(ep, t, kind, bytes, want, quick), asio::detached);
  for (int64_t i = 0; i < o.slowloris; ++i) {
    if (i % 2 == 0)
      asio::co_spawn(ioc, dribble(ep, t, "slowloris headers", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ", bound),
                     asio::detached);
    else
      asio::co_spawn(ioc, dribble(ep, t, "slowloris body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                         "application/json\r\nContent-Length: 100000\r\n\r\n{\"prompt\":\"", bound),
                     asio::detached);
  }
  for (int64_t i = 0; i < n; ++i) {
    const std::pair<std::string, std::string> ws_cases[] = {
        {"WebSocket deeply nested JSON", R"({"type":"completions","id":"d","body":)" + nested(100000) + "}"},
        {"WebSocket invalid UTF-8 frame", "{\"type\":\"completions\",\"id\":\"\xff\xfe\",\"body\":{}}"},
        {"WebSocket malformed JSON", "{\"type\":"},
    };
    for (const auto& [kind, payload] : ws_cases)
      asio::co_spawn(ioc,
                     [&t, ep, kind, payload, quick]() -> asio::awaitable<void> {
                       const ws_probe_result r = co_await ws_probe(ep, payload, quick);
                       const bool error_frame = r.first_frame.find("\"type\":\"error\"") != std::string::npos;
                       note(t, kind, r.handshake_ok && (error_frame || r.closed),
                            fmt::format("handshake {} closed {} frame {}", r.handshake_ok, r.closed, r.first_frame.substr(0, 120)));
                     },
                     asio::detached);
  }
  // The idle connections, connected a few hundred at a time (the listen backlog is finite).
  asio::co_spawn(
      ioc,
      [&ioc, ep, &t, &connecting, bound, count = o.idle_connections]() -> asio::awaitable<void> {
        for (int64_t i = 0; i < count; ++i) {
          while (connecting >= 256) co_await sleep_for(ms_t(2));
          ++connecting;
          asio::co_spawn(ioc, idle_connection(ep, t, bound, connecting), asio::detached);
        }
      },
      asio::detached);
  return n * static_cast<int64_t>(shots.size() + 3) + o.slowloris + o.idle_connections;
}

/// Well-behaved clients: one on a kept-alive connection, one on a new connection per request.
asio::awaitable<void> wellbehaved(tcp::endpoint ep, const storm_options& o, bool fresh, int64_t count, const bool* stop,
                                  std::vector<double>& ms, int64_t& failed) {
  std::optional<keepalive_client> kept;
  const std::vector<int32_t> prompt{11, 12, 13, 14, 15, 16, 17, 18};
  for (int64_t i = 0; i < count || (stop && !*stop); ++i) {
    if (!kept || fresh) kept.emplace(ep);
    const auto t0 = clock_type::now();
    http_reply r = co_await kept->call("POST", "/v1/completions", completion_body(o.model, prompt, 8, false), ms_t(30000));
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    if (r.status != 200 || token_ids_in(r.body).size() != 8) ++failed;
    if (i >= 100 * count) break;
  }
}

}  // namespace

int run_hostile(const storm_options& o) {
  verdict v;
  const tcp::endpoint ep = endpoint_of(o);
  const server_metrics m0 = scrape(ep);
  if (!m0.ok) {
    fmt::print("error: GET /metrics failed at {}:{}\n", o.host, o.port);
    return 2;
  }
  fmt::print("hostile clients: {} idle connections, {} slowloris, {} well-behaved requests per phase; server deadline "
             "{:.0f} s; bound: p50/p99 <= max({:.1f} x baseline, baseline + {:.0f} ms)\n",
             o.idle_connections, o.slowloris, o.wellbehaved_requests, o.server_deadline_s, o.latency_factor,
             o.latency_slack_ms);
  std::fflush(stdout);
  const int64_t half = std::max<int64_t>(1, o.wellbehaved_requests / 2);
  std::vector<double> base_ms;
  int64_t base_failed = 0;
  {
    asio::io_context ioc;
    asio::co_spawn(ioc, wellbehaved(ep, o, false, half, nullptr, base_ms, base_failed), asio::detached);
    asio::co_spawn(ioc, wellbehaved(ep, o, true, half, nullptr, base_ms, base_failed), asio::detached);
    run_for(ioc, std::chrono::duration<double>(o.time_limit_s));
  }
  const process_figures before = read_process(o.server_pid);

  tally_map t;
  std::vector<double> attack_ms;
  int64_t attack_failed = 0, connecting = 0;
  bool stop = false;
  const auto t0 = clock_type::now();
  asio::io_context ioc;
  const int64_t hostiles = launch_hostiles(ioc, ep, o, t, connecting);
  int64_t hostiles_left = 2;
  auto done = [&](std::exception_ptr) {
    if (--hostiles_left == 0) ioc.stop();
  };
  // The attack phase lasts until every hostile client got its answer; the well-behaved clients
  // keep going (at least their count) until then.
  asio::co_spawn(ioc, wellbehaved(ep, o, false, half, &stop, attack_ms, attack_failed), done);
  asio::co_spawn(ioc, wellbehaved(ep, o, true, half, &stop, attack_ms, attack_failed), done);
  asio::steady_timer poll(ioc);
  std::function<void()> check_hostiles = [&] {
    int64_t pending = hostiles;
    for (const auto& [kind, k] : t) pending -= k.sent;
    if (pending <= 0) {
      stop = true;
      return;
    }
    poll.expires_after(ms_t(100));
    poll.async_wait([&](beast::error_code ec) {
      if (!ec) check_hostiles();
    });
  };
  check_hostiles();
  const bool hit_limit = run_for(ioc, std::chrono::duration<double>(o.time_limit_s));
  const double secs = since(t0);
  const server_metrics m1 = wait_for(ep, ms_t(30000), [](const server_metrics& m) { return m.get("open_connections") <= 1; });
  const process_figures after = read_process(o.server_pid);
  const http_reply health = blocking_call(ep, "GET", "/health");

  fmt::print("attack phase: {:.1f} s; server connections_timed_out +{:.0f}, connections_refused +{:.0f}, "
             "open_connections after {:.0f}\n",
             secs, m1.get("connections_timed_out_total") - m0.get("connections_timed_out_total"),
             m1.get("connections_refused_total") - m0.get("connections_refused_total"), m1.get("open_connections"));
  fmt::print("{:<40} {:>7} {:>8} {:>12}\n", "hostile client", "sent", "limited", "close p50/max");
  for (const auto& [kind, k] : t) {
    const auto c = latencies(k.close_s);
    fmt::print("{:<40} {:>7} {:>8} {:>12}\n", kind, k.sent, k.limited,
               k.close_s.empty() ? std::string("-") : fmt::format("{:.1f}/{:.1f} s", c.p50, c.max));
  }
  const auto b = latencies(base_ms), a = latencies(attack_ms);
  fmt::print("well-behaved latency, baseline: {} requests, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms ({} failed)\n",
             b.count, b.p50, b.p99, b.max, base_failed);
  fmt::print("well-behaved latency, under attack: {} requests, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms ({} failed)\n",
             a.count, a.p50, a.p99, a.max, attack_failed);
  fmt::print("server process: RSS {} -> {} KiB, threads {} -> {}, fds {} -> {}\n", before.rss_kib, after.rss_kib,
             before.threads, after.threads, before.fds, after.fds);
  v.check(!hit_limit, fmt::format("finished within the time limit ({:.0f} s)", o.time_limit_s));
  for (const auto& [kind, k] : t)
    v.check(k.limited == k.sent, fmt::format("{}: {} of {} got their limit{}{}", kind, k.limited, k.sent,
                                             k.first_bad.empty() ? "" : "; first other: ", k.first_bad));
  v.check(base_failed == 0 && attack_failed == 0, "every well-behaved request succeeded");
  auto bound = [&](double base) { return std::max(o.latency_factor * base, base + o.latency_slack_ms); };
  v.check(a.p50 <= bound(b.p50), fmt::format("p50 under attack {:.1f} ms <= {:.1f} ms", a.p50, bound(b.p50)));
  v.check(a.p99 <= bound(b.p99), fmt::format("p99 under attack {:.1f} ms <= {:.1f} ms", a.p99, bound(b.p99)));
  v.check(m1.get("open_connections") <= 1, "every hostile connection is closed afterwards");
  v.check(health.status == 200, "GET /health answers 200 afterwards");
  if (o.server_pid > 0) v.check(after.fds <= before.fds + 2, "server descriptors back to baseline");
  return v.exit_code();
}

}  // namespace actorserve::bench::storm
