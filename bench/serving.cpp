// bench_serving: an online serving benchmark against a running `actorserve serve` (or any
// OpenAI-compatible server that takes token-id prompts and ignore_eos). Sends streamed
// /v1/completions requests at a Poisson rate and/or under a concurrency cap, with fixed, uniform
// or ShareGPT-like lengths, and prints vLLM benchmark_serving's result table. --random-prefix-len P
// starts every prompt with the same P tokens; --preset shared-system-prompt is issue #37's
// workload (256 requests behind one 4096-token prefix, 128 in / 512 out).
//   bench_serving --port 8000 --model-dir DIR --num-prompts 1000 --request-rate 16
//                 --length-distribution sharegpt
#include <fmt/format.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "bench/common/bench_cli.hpp"
#include "bench/common/length_dist.hpp"
#include "bench/common/serving_client.hpp"
#include "bench/common/shared_prefix.hpp"
#include "bench/common/stats.hpp"
#include "config/model_config.hpp"

namespace {

using namespace actorserve;

void row(const char* name, double v) { fmt::print("{:<40} {:<10.2f}\n", name, v); }
void row(const char* name, int64_t v) { fmt::print("{:<40} {:<10}\n", name, v); }
/// `text` centred in 50 columns of `fill`, as Python's "{:=^50}" pads it.
void title(std::string_view text, char fill) {
  const size_t pad = text.size() < 50 ? 50 - text.size() : 0;
  fmt::print("{}{}{}\n", std::string(pad / 2, fill), text, std::string(pad - pad / 2, fill));
}

/// vLLM benchmark_serving's table, plus a few lines of our own after it.
void print_table(const bench::serving_run& run, double rate, int64_t max_concurrency) {
  int64_t ok = 0, input = 0, output = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& o : run.outcomes) {
    if (!o.success) continue;
    ++ok;
    input += o.prompt_len;
    output += o.output_tokens;
    ttft.push_back(1000 * o.ttft_s);
    e2e.push_back(1000 * o.latency_s);
    if (o.output_tokens > 1) tpot.push_back(1000 * (o.latency_s - o.ttft_s) / double(o.output_tokens - 1));
    for (double g : o.itl_s) itl.push_back(1000 * g);
  }
  const double d = std::max(run.duration_s, 1e-9);
  title(" Serving Benchmark Result ", '=');
  row("Successful requests:", ok);
  if (max_concurrency > 0) row("Maximum request concurrency:", max_concurrency);
  row("Benchmark duration (s):", run.duration_s);
  row("Total input tokens:", input);
  row("Total generated tokens:", output);
  row("Request throughput (req/s):", double(ok) / d);
  row("Output token throughput (tok/s):", double(output) / d);
  row("Total Token throughput (tok/s):", double(input + output) / d);
  const auto t = bench::summarize(ttft), p = bench::summarize(tpot), i = bench::summarize(itl);
  title("Time to First Token", '-');
  row("Mean TTFT (ms):", t.mean);
  row("Median TTFT (ms):", t.median);
  row("P99 TTFT (ms):", t.p99);
  title("Time per Output Token (excl. 1st token)", '-');
  row("Mean TPOT (ms):", p.mean);
  row("Median TPOT (ms):", p.median);
  row("P99 TPOT (ms):", p.p99);
  title("Inter-token Latency", '-');
  row("Mean ITL (ms):", i.mean);
  row("Median ITL (ms):", i.median);
  row("P99 ITL (ms):", i.p99);
  title("", '=');
  const auto e = bench::summarize(e2e);
  fmt::print("Failed requests: {}; traffic request rate: {}; peak concurrency: {}; E2E latency mean {:.2f} ms, "
             "median {:.2f} ms, p99 {:.2f} ms\n",
             int64_t(run.outcomes.size()) - ok, std::isfinite(rate) ? fmt::format("{:.2f}", rate) : "inf",
             run.peak_concurrency, e.mean, e.median, e.p99);
  int shown = 0;
  for (const auto& o : run.outcomes)
    if (!o.success && shown++ < 3) fmt::print("  failure: {}\n", o.error);
}

}  // namespace

int main(int argc, char** argv) {
  bench::serving_options so;
  std::string model_dir, dist_name = "fixed";
  int64_t vocab = 0, seed = 0, port = 8000;
  bench::workload_lengths w{1000, 0, 1024, 128};
  std::string preset;
  double rate = std::numeric_limits<double>::infinity(), range_ratio = 0.0;
  int64_t max_concurrency = 0;
  std::vector<bench::bench_option> own{
      {"--host", "server address", &so.host},
      {"--port", "server port", &port},
      {"--model", "model name sent in requests (default: GET /v1/models)", &so.model},
      {"--model-dir", "model directory whose config.json gives the vocabulary size", &model_dir},
      {"--vocab-size", "prompt token ids are drawn below this (instead of --model-dir)", &vocab},
      {"--api-key", "Bearer token", &so.api_key},
      {"--num-prompts", "number of requests", &w.num_prompts},
      {"--request-rate", "requests per second, Poisson arrivals (inf: all at once)", &rate},
      {"--burstiness", "gamma shape of inter-arrival times (1: Poisson)", &so.burstiness},
      {"--max-concurrency", "requests in flight at most (0: no cap)", &max_concurrency},
      {"--length-distribution", "fixed | uniform | sharegpt", &dist_name},
      {"--input-len", "prompt tokens (fixed, uniform)", &w.input_len},
      {"--random-prefix-len",
       "tokens of one shared prefix every prompt starts with (the untimed test request caches it)", &w.prefix_len},
      {"--preset", "shared-system-prompt: 256 prompts behind one 4096-token prefix, 128 in / 512 out (issue #37)",
       &preset},
      {"--output-len", "max_tokens (fixed, uniform)", &w.output_len},
      {"--range-ratio", "uniform: lengths in [len*(1-r), len*(1+r)]", &range_ratio},
      {"--temperature", "sampling temperature", &so.temperature},
      {"--extra-body", "a JSON object whose fields join every request, e.g. a response_format", &so.extra_body},
      {"--seed", "seed of lengths, prompts and arrivals", &seed},
      {"--wait-for-server", "seconds to wait for GET /health to answer 200", &so.wait_for_server_s},
      {"--server-pid", "stop waiting for the server when this process has exited", &so.server_pid},
      {"--timeout", "seconds any network operation may take", &so.idle_timeout_s},
      {"--duration-limit", "stop after this many seconds; unfinished requests count as failed (0: none)",
       &so.duration_limit_s},
  };
  auto cl = bench::parse_bench_command_line("Online serving benchmark over HTTP/SSE (vLLM benchmark_serving)", own,
                                            false, argc, argv);
  if (!cl) return fmt::print(stderr, "error: {}\n", cl.err().message), 2;
  if (cl->exit_now) return fmt::print("{}", cl->output), 0;
  if (auto st = bench::apply_preset(preset, argc, argv, w); !st)
    return fmt::print(stderr, "error: {}\n", st.err().message), 2;
  const int64_t num_prompts = w.num_prompts, prefix_len = w.prefix_len;
  if (prefix_len < 0) return fmt::print(stderr, "error: --random-prefix-len must not be negative\n"), 2;
  if (vocab <= 0 && !model_dir.empty()) {
    auto cfg = load_model_config(model_dir);
    if (!cfg) return fmt::print(stderr, "error: {}\n", cfg.err().message), 2;
    vocab = cfg->vocab_size;
  }
  if (vocab <= 0) return fmt::print(stderr, "error: give --model-dir or --vocab-size\n"), 2;
  auto kind = bench::parse_length_kind(dist_name);
  if (!kind) return fmt::print(stderr, "error: {}\n", kind.err().message), 2;
  if (num_prompts < 1 || !(rate > 0)) return fmt::print(stderr, "error: --num-prompts and --request-rate must be positive\n"), 2;
  // NOTE: one socket per request in flight; the default soft limit (1024) is too low for bursts.
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  so.port = port;
  so.request_rate = rate;
  so.max_concurrency = max_concurrency;
  so.seed = static_cast<uint64_t>(seed);

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  bench::length_spec spec{kind.value(), w.input_len, w.output_len, range_ratio};
  std::vector<bench::serving_request> reqs;
  std::vector<double> in_lens, out_lens;
  // NOTE: the first request is also the untimed test request, which puts the shared prefix in
  // the prefix cache before the clock starts, as a chat backend's system prompt is warm.
  const std::vector<int32_t> prefix = bench::shared_prefix_ids(seed, prefix_len, vocab);
  for (auto [in, out] : bench::sample_lengths(spec, num_prompts, rng)) {
    reqs.push_back({bench::prefixed_prompt(prefix, rng, in, vocab), out});
    in_lens.push_back(in);
    out_lens.push_back(out);
  }
  const auto il = bench::summarize(in_lens), ol = bench::summarize(out_lens);
  fmt::print("bench_serving: {}\n", bench::command_line_text(argc, argv));
  fmt::print("{} requests, {} lengths: {}input mean {:.0f} / median {:.0f} / p99 {:.0f}, output mean {:.0f} / "
             "median {:.0f} / p99 {:.0f}; request rate {}, max concurrency {}\n",
             num_prompts, dist_name, prefix_len > 0 ? fmt::format("{} shared prefix tokens + ", prefix_len) : "",
             il.mean, il.median, il.p99, ol.mean, ol.median, ol.p99,
             std::isfinite(rate) ? fmt::format("{:.2f}/s", rate) : "inf",
             max_concurrency > 0 ? std::to_string(max_concurrency) : "none");
  std::fflush(stdout);
  auto run = bench::run_serving(so, reqs);
  if (!run) return fmt::print(stderr, "error: {}\n", run.err().message), 1;
  fmt::print("model {} at {}:{}\n", run->model, so.host, so.port);
  if (run->hit_duration_limit)
    fmt::print("DURATION LIMIT of {:.0f} s reached: unfinished requests were abandoned\n", so.duration_limit_s);
  print_table(run.value(), rate, max_concurrency);
  int64_t failed = 0;
  for (const auto& o : run->outcomes) failed += o.success ? 0 : 1;
  return failed == 0 ? 0 : 1;
}
