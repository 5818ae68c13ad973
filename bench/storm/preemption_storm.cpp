// Preemption storm: many greedy /v1/completions requests (whole and streamed) against a KV pool
// capped far below their demand. Every request must complete with exactly the tokens of an
// uncapped run (a reference file written by that run), and the pool must be empty at the end.
#include <fmt/format.h>

#include <fstream>
#include <random>
#include <sstream>

#include "bench/storm/storm_net.hpp"

namespace actorserve::bench::storm {
namespace {

struct job {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  bool stream = false;
};

struct outcome {
  bool ok = false;
  std::string error;
  std::vector<int32_t> ids;
  double ms = 0;
};

std::vector<job> make_jobs(const storm_options& o) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  std::uniform_int_distribution<int64_t> prompt_len(8, 48), out_len(8, 32);
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(o.vocab - 1));
  std::vector<job> jobs(static_cast<size_t>(o.requests));
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].prompt.resize(static_cast<size_t>(prompt_len(rng)));
    for (auto& t : jobs[i].prompt) t = token(rng);
    jobs[i].max_tokens = out_len(rng);
    jobs[i].stream = i % 4 == 3;  // a quarter streamed over SSE, the rest whole
  }
  return jobs;
}

asio::awaitable<void> worker(tcp::endpoint ep, const storm_options& o, const std::vector<job>& jobs,
                             std::vector<outcome>& out, size_t& next) {
  keepalive_client client(ep);
  while (next < jobs.size()) {
    const size_t i = next++;
    const job& j = jobs[i];
    const auto t0 = clock_type::now();
    http_reply r = co_await client.call("POST", "/v1/completions", completion_body(o.model, j.prompt, j.max_tokens, j.stream),
                                        std::chrono::seconds(120));
    outcome& res = out[i];
    res.ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (r.status != 200) {
      res.error = r.status == 0 ? r.error : fmt::format("HTTP {}: {}", r.status, r.body.substr(0, 200));
      continue;
    }
    res.ids = token_ids_in(r.body);
    if (j.stream && r.body.find("data: [DONE]") == std::string::npos) res.error = "stream without [DONE]";
    else if (static_cast<int64_t>(res.ids.size()) != j.max_tokens)
      res.error = fmt::format("{} tokens, asked {}", res.ids.size(), j.max_tokens);
    else res.ok = true;
  }
}

std::string line_of(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(s), "{}{}", i ? "," : "", ids[i]);
  return s;
}

}  // namespace

int run_preemption(const storm_options& o) {
  verdict v;
  const tcp::endpoint ep = endpoint_of(o);
  const std::vector<job> jobs = make_jobs(o);
  int64_t prompt_tokens = 0, output_tokens = 0, demand = 0;
  for (const auto& j : jobs) {
    prompt_tokens += static_cast<int64_t>(j.prompt.size());
    output_tokens += j.max_tokens;
    demand += (static_cast<int64_t>(j.prompt.size()) + j.max_tokens + o.block_size - 1) / o.block_size;
  }
  const server_metrics before = scrape(ep);
  if (!before.ok) {
    fmt::print("error: GET /metrics failed at {}:{}\n", o.host, o.port);
    return 2;
  }
  const double pool = before.get("kv_blocks_total");
  const double in_flight_demand = double(demand) / double(jobs.size()) * double(o.concurrency);
  fmt::print("preemption storm: {} requests ({} streamed), concurrency {}, seed {}\n", jobs.size(), jobs.size() / 4,
             o.concurrency, o.seed);
  fmt::print("tokens: {} prompt + {} output; KV demand {} blocks of {} tokens; pool {} blocks = {:.2f} % of the "
             "demand, {:.1f} % of the in-flight demand (~{:.0f} blocks)\n",
             prompt_tokens, output_tokens, demand, o.block_size, pool, 100.0 * pool / double(demand),
             100.0 * pool / in_flight_demand, in_flight_demand);
  std::fflush(stdout);

  asio::io_context ioc;
  std::vector<outcome> out(jobs.size());
  size_t next = 0;
  for (int64_t w = 0; w < o.concurrency; ++w)
    asio::co_spawn(ioc, worker(ep, o, jobs, out, next), asio::detached);
  const auto t0 = clock_type::now();
  const bool hit_limit = run_for(ioc, std::chrono::duration<double>(o.time_limit_s));
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();

  int64_t completed = 0;
  std::vector<double> ms;
  std::string first_error;
  for (const auto& r : out) {
    if (r.ok) {
      ++completed;
      ms.push_back(r.ms);
    } else if (first_error.empty()) first_error = r.error.empty() ? "not finished" : r.error;
  }
  const server_metrics after = wait_for(ep, std::chrono::seconds(30), engine_quiet);
  const auto lat = latencies(ms);
  const double preemptions = after.get("num_preemptions_total") - before.get("num_preemptions_total");
  const double recomputed = after.get("num_recomputed_tokens_total") - before.get("num_recomputed_tokens_total");
  fmt::print("completed {} / {} in {:.1f} s ({:.1f} req/s, {:.0f} output tok/s); latency p50 {:.1f} ms, p99 {:.1f} ms, "
             "max {:.1f} ms\n",
             completed, jobs.size(), secs, double(completed) / secs, double(output_tokens) / secs, lat.p50, lat.p99, lat.max);
  fmt::print("preemptions {:.0f}, recomputed tokens {:.0f}\n", preemptions, recomputed);
  fmt::print("end state: running {:.0f}, waiting {:.0f}, kv_blocks_used {:.0f}, engine_requests_alive {:.0f}, "
             "active_jobs {:.0f}\n",
             after.get("num_requests_running"), after.get("num_requests_waiting"), after.get("kv_blocks_used"),
             after.get("engine_requests_alive"), after.get("active_jobs"));

  int64_t mismatches = 0;
  if (!o.write_reference.empty()) {
    std::ofstream f(o.write_reference);
    for (size_t i = 0; i < out.size(); ++i) f << i << ' ' << line_of(out[i].ids) << '\n';
    fmt::print("reference written to {}\n", o.write_reference);
  }
  if (!o.check_reference.empty()) {
    std::ifstream f(o.check_reference);
    std::string line;
    size_t lines = 0;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      size_t i = 0;
      std::string ids;
      ls >> i >> ids;
      ++lines;
      if (i >= out.size() || line_of(out[i].ids) != ids) {
        if (mismatches++ < 3) fmt::print("  mismatch at request {}: got [{}], reference [{}]\n", i,
                                         i < out.size() ? line_of(out[i].ids) : "", ids);
      }
    }
    if (lines != out.size()) mismatches += static_cast<int64_t>(out.size()) - static_cast<int64_t>(lines);
    fmt::print("compared with {}: {} mismatches in {} requests\n", o.check_reference, mismatches, out.size());
  }
  v.check(!hit_limit, fmt::format("finished within the time limit ({:.0f} s)", o.time_limit_s));
  v.check(completed == static_cast<int64_t>(jobs.size()),
          fmt::format("every request completed ({} failed{}{})", int64_t(jobs.size()) - completed,
                      first_error.empty() ? "" : "; first: ", first_error));
  if (!o.check_reference.empty()) v.check(mismatches == 0, "greedy outputs identical to the uncapped reference");
  if (o.max_pool_fraction > 0)
    v.check(pool > 0 && pool <= o.max_pool_fraction * double(demand),
            fmt::format("KV pool ({:.0f} blocks) at most {:.0f} % of the demand", pool, 100 * o.max_pool_fraction));
  if (o.expect_preemptions) v.check(preemptions > 0, "the capped pool forced preemptions");
  v.check(engine_quiet(after), "zero KV blocks in use and no request left in the engine at the end");
  return v.exit_code();
}

}  // namespace actorserve::bench::storm
