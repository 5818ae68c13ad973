// Abort storm: SSE and WebSocket streams cut at random points, mid-prefill (right after the
// request is sent) and mid-decode (after a random number of tokens), by FIN, by RST, or (WebSocket)
// by cancel frames. Afterwards the engine must hold nothing, the server's RSS, threads and
// descriptors must be back at their baseline, and it must keep answering throughout.
#include <fmt/format.h>

#include <random>

#include "bench/storm/abort_ws.hpp"
#include "bench/storm/storm_net.hpp"

namespace actorserve::bench::storm {
namespace {

/// Draws the plan of stream `i` (deterministic in the seed).
stream_plan plan_of(const storm_options& o, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  stream_plan p;
  p.websocket = u(rng) < o.ws_fraction;
  p.mid_prefill = u(rng) < 0.4;
  p.how = static_cast<cut_style>(std::uniform_int_distribution<int>(0, p.websocket ? 2 : 1)(rng));
  p.prompt_len = p.mid_prefill ? std::uniform_int_distribution<int64_t>(256, 768)(rng)
                               : std::uniform_int_distribution<int64_t>(8, 64)(rng);
  p.max_tokens = std::uniform_int_distribution<int64_t>(64, 512)(rng);
  p.cut_after = std::uniform_int_distribution<int64_t>(1, p.max_tokens - 1)(rng);
  p.delay_us = std::uniform_int_distribution<int64_t>(0, 3000)(rng);
  p.requests = p.websocket ? std::uniform_int_distribution<int>(1, 3)(rng) : 1;
  p.prompt.resize(static_cast<size_t>(p.prompt_len));
  for (auto& t : p.prompt) t = std::uniform_int_distribution<int32_t>(2, static_cast<int32_t>(o.vocab - 1))(rng);
  return p;
}

void cut(tcp::socket& s, cut_style how) {
  beast::error_code ec;
  if (how == cut_style::rst) s.set_option(asio::socket_base::linger(true, 0), ec);
  else s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
}

/// One SSE stream over a raw socket, cut as planned.
asio::awaitable<void> sse_stream(tcp::endpoint ep, const storm_options& o, const stream_plan& p, abort_tally& t) {
  tcp::socket s(co_await asio::this_coro::executor);
  auto [cec] = co_await s.async_connect(ep, nothrow);
  if (cec) {
    t.note_error("connect: " + cec.message());
    co_return;
  }
  const std::string body = completion_body(o.model, p.prompt, p.max_tokens, true);
  const std::string req = fmt::format("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                      "application/json\r\nContent-Length: {}\r\n\r\n{}",
                                      body.size(), body);
  auto [wec, wn] = co_await asio::async_write(s, asio::buffer(req), nothrow);
  if (wec) {
    t.note_error("write: " + wec.message());
    co_return;
  }
  if (p.mid_prefill) {
    if (p.delay_us > 0) co_await sleep_for(std::chrono::microseconds(p.delay_us));
    cut(s, p.how);
    ++t.cut_prefill;
    co_return;
  }
  std::string seen;
  std::array<char, 4096> buf{};
  int64_t events = 0;
  asio::steady_timer guard(s.get_executor());
  guard.expires_after(std::chrono::seconds(60));
  guard.async_wait([&s](beast::error_code ec) {
    if (!ec) s.close(ec);
  });
  for (;;) {
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), nothrow);
    if (rec) {
      t.note_error("read: " + rec.message());
      break;
    }
    seen.append(buf.data(), n);
    if (events == 0 && status_of(seen) != 0 && status_of(seen) != 200) {
      t.note_error(fmt::format("HTTP {}", status_of(seen)));
      break;
    }
    size_t pos = 0;
    events = 0;
    while ((pos = seen.find("data: {", pos)) != std::string::npos) ++events, ++pos;
    if (seen.find("data: [DONE]") != std::string::npos) {
      ++t.finished_before_cut;
      break;
    }
    if (events >= p.cut_after) {
      cut(s, p.how);
      ++t.cut_decode;
      break;
    }
  }
  guard.cancel();
}

asio::awaitable<void> worker(tcp::endpoint ep, const storm_options& o, std::vector<stream_plan>& plans, size_t& next,
                             abort_tally& t) {
  while (next < plans.size()) {
    const stream_plan& p = plans[next++];
    if (p.websocket) co_await ws_streams(ep, o, p, t);
    else co_await sse_stream(ep, o, p, t);
    ++t.streams_done;
  }
}

/// While the storm runs, a well-behaved client must keep getting whole answers.
asio::awaitable<void> prober(tcp::endpoint ep, const storm_options& o, const bool& stop, abort_tally& t) {
  keepalive_client c(ep);
  const std::vector<int32_t> prompt{5, 6, 7, 8};
  while (!stop) {
    http_reply r = co_await c.call("POST", "/v1/completions", completion_body(o.model, prompt, 4, false),
                                   std::chrono::seconds(30));
    ++t.probes;
    if (r.status != 200 || token_ids_in(r.body).size() != 4) ++t.probes_failed;
    co_await sleep_for(std::chrono::milliseconds(200));
  }
}

/// Runs `count` planned streams; returns false when the time limit was hit.
bool storm(const storm_options& o, tcp::endpoint ep, int64_t count, uint64_t seed, abort_tally& t, double limit_s) {
  std::mt19937_64 rng(seed);
  std::vector<stream_plan> plans;
  int64_t streams = 0;
  while (streams < count) {
    plans.push_back(plan_of(o, rng));
    streams += plans.back().requests;
  }
  asio::io_context ioc;
  size_t next = 0;
  bool stop = false;
  int64_t workers_left = o.concurrency;
  for (int64_t w = 0; w < o.concurrency; ++w)
    asio::co_spawn(ioc, worker(ep, o, plans, next, t), [&](std::exception_ptr) {
      if (--workers_left == 0) stop = true;
    });
  asio::co_spawn(ioc, prober(ep, o, stop, t), asio::detached);
  t.planned += streams;
  return !run_for(ioc, std::chrono::duration<double>(limit_s));
}

}  // namespace

void abort_tally::note_error(const std::string& what) {
  if (errors++ == 0) first_error = what;
}

int run_abort(const storm_options& o) {
  verdict v;
  const tcp::endpoint ep = endpoint_of(o);
  if (!scrape(ep).ok) {
    fmt::print("error: GET /metrics failed at {}:{}\n", o.host, o.port);
    return 2;
  }
  fmt::print("abort storm: {} streams ({:.0f} % WebSocket), concurrency {}, seed {}\n", o.requests,
             100 * o.ws_fraction, o.concurrency, o.seed);
  // Warm-up: the allocator and the engine reach their steady state before the baseline is taken.
  abort_tally warm;
  const auto t0 = clock_type::now();
  const int64_t warmup = o.warmup > 0 ? o.warmup : std::max<int64_t>(50, o.requests / 10);
  storm(o, ep, warmup, static_cast<uint64_t>(o.seed) + 1000, warm, o.time_limit_s);
  wait_for(ep, std::chrono::seconds(30), [](const server_metrics& m) {
    return engine_quiet(m) && m.get("open_connections") <= 1;
  });
  const process_figures base = read_process(o.server_pid);
  fmt::print("warm-up: {} streams in {:.1f} s; baseline RSS {} KiB, threads {}, fds {}\n", warm.planned,
             std::chrono::duration<double>(clock_type::now() - t0).count(), base.rss_kib, base.threads, base.fds);
  std::fflush(stdout);

  abort_tally t;
  const auto t1 = clock_type::now();
  const bool in_time = storm(o, ep, o.requests, static_cast<uint64_t>(o.seed), t, o.time_limit_s);
  const double secs = std::chrono::duration<double>(clock_type::now() - t1).count();
  const auto t2 = clock_type::now();
  const server_metrics end = wait_for(ep, std::chrono::seconds(60), [](const server_metrics& m) {
    return engine_quiet(m) && m.get("open_connections") <= 1;
  });
  const double settle = std::chrono::duration<double>(clock_type::now() - t2).count();
  const process_figures after = read_process(o.server_pid);
  const http_reply probe = blocking_call(ep, "POST", "/v1/completions",
                                         completion_body(o.model, {5, 6, 7, 8}, 8, false));
  fmt::print("streams {} in {:.1f} s ({:.0f} streams/s): cut mid-prefill {}, cut mid-decode {}, websocket cancel "
             "frames {} (acknowledged {}), finished before the cut {}, client-side errors {}{}{}\n",
             t.planned, secs, double(t.planned) / secs, t.cut_prefill, t.cut_decode, t.ws_cancelled, t.ws_cancel_acked,
             t.finished_before_cut, t.errors, t.errors ? "; first: " : "", t.first_error);
  fmt::print("probes during the storm: {} ({} failed)\n", t.probes, t.probes_failed);
  fmt::print("settled in {:.1f} s: running {:.0f}, waiting {:.0f}, kv_blocks_used {:.0f}, engine_requests_alive {:.0f}, "
             "active_jobs {:.0f}, open_connections {:.0f}; engine requests submitted {:.0f}, cancelled {:.0f}\n",
             settle, end.get("num_requests_running"), end.get("num_requests_waiting"), end.get("kv_blocks_used"),
             end.get("engine_requests_alive"), end.get("active_jobs"), end.get("open_connections"),
             end.get("engine_requests_submitted_total"), end.get("requests_cancelled_total"));
  fmt::print("server process: RSS {} -> {} KiB ({:+.1f} MiB), threads {} -> {}, fds {} -> {}\n", base.rss_kib,
             after.rss_kib, double(after.rss_kib - base.rss_kib) / 1024.0, base.threads, after.threads, base.fds,
             after.fds);
  v.check(in_time, fmt::format("finished within the time limit ({:.0f} s)", o.time_limit_s));
  v.check(t.errors == 0, "every stream was accepted and streamed until its cut");
  v.check(t.cut_prefill > 0 && t.cut_decode > 0, "streams were cut both mid-prefill and mid-decode");
  v.check(t.ws_cancelled == t.ws_cancel_acked, "every WebSocket cancel was answered with its done frame");
  v.check(t.probes > 0 && t.probes_failed == 0, "the server kept answering during the storm");
  v.check(engine_quiet(end), "zero KV blocks in use, no request running, waiting or alive in the engine");
  v.check(end.get("open_connections") <= 1, "every cut connection was closed by the server");
  v.check(probe.status == 200 && token_ids_in(probe.body).size() == 8, "a request after the storm completes");
  if (o.server_pid > 0) {
    if (o.rss_slack_mib >= 0)
      v.check(double(after.rss_kib - base.rss_kib) <= o.rss_slack_mib * 1024,
              fmt::format("RSS back to its baseline (within {:.0f} MiB)", o.rss_slack_mib));
    else
      fmt::print("  [--] RSS not checked (--rss-slack-mib < 0)\n");
    v.check(after.threads == base.threads && after.fds <= base.fds + 2, "threads and descriptors back to baseline");
  }
  return v.exit_code();
}

}  // namespace actorserve::bench::storm
