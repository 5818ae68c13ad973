// bench_latency: one request at a time (prompt P random token ids, O generated tokens with
// ignore_eos) through the actor engine, several timed iterations after warm-up. Prints vLLM
// benchmark_latency's `Avg latency` and percentile lines, then time to first token, decode
// tokens/s and the per-token latency percentiles (gaps between consecutive generated tokens).
//   bench_latency --model DIR --input-len 128 --output-len 256 --num-iters 5
#include <fmt/format.h>

#include <cstdio>
#include <random>

#include "bench/common/bench_cli.hpp"
#include "bench/common/engine_runner.hpp"
#include "bench/common/stats.hpp"
#include "bench/common/tuning_args.hpp"
#include "config/model_config.hpp"

namespace {

using namespace actorserve;

struct options {
  int64_t input_len = 128, output_len = 256, num_iters = 5, num_warmup = 2, seed = 0;
  double timeout_s = 600;
};

/// One single-request run; returns its record.
result<bench::request_record> run_one(actors::engine& eng, const options& o, int64_t vocab, std::mt19937_64& rng,
                                      int64_t iter) {
  actors::generation_request r;
  r.request_id = fmt::format("latency-{}", iter);
  r.prompt_ids = bench::random_token_ids(rng, static_cast<int32_t>(o.input_len), vocab);
  r.params.max_tokens = static_cast<int32_t>(o.output_len);
  r.params.ignore_eos = true;
  r.params.temperature = 0.0f;
  std::vector<actors::generation_request> reqs;
  reqs.push_back(std::move(r));
  auto rep = bench::run_requests(eng, std::move(reqs), false, o.timeout_s);
  if (!rep) return rep.err();
  if (rep->timed_out) return make_error(error_code::cancelled, fmt::format("timed out after {:.0f} s", o.timeout_s));
  auto rec = rep->requests.at(0);
  if (!rec.error.empty()) return make_error(error_code::internal, rec.error);
  return rec;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::vector<bench::bench_option> own{
      {"--input-len", "prompt tokens", &o.input_len},
      {"--output-len", "generated tokens (ignore_eos)", &o.output_len},
      {"--num-iters", "timed iterations", &o.num_iters},
      {"--num-iters-warmup", "untimed warm-up iterations", &o.num_warmup},
      {"--bench-seed", "seed of the random prompts", &o.seed},
      {"--timeout", "give up on an iteration after this many seconds", &o.timeout_s},
  };
  // The CUDA kernel choices (bench/cuda/tuning_flags.hpp) for A/B runs of one build.
  const bench::tuning_args tuning = bench::split_tuning_flags(argc, argv);
  auto cl = bench::parse_bench_command_line("Single-stream latency through the actor engine (vLLM benchmark_latency)",
                                            own, true, int(tuning.rest.size()), tuning.rest.data());
  if (!cl) return fmt::print(stderr, "error: {}\n", cl.err().message), 2;
  if (cl->exit_now) return fmt::print("{}", cl->output), 0;
  if (o.input_len < 1 || o.output_len < 2 || o.num_iters < 1)
    return fmt::print(stderr, "error: --input-len >= 1, --output-len >= 2 and --num-iters >= 1 required\n"), 2;
  const engine_config& cfg = cl->engine;
  if (auto st = bench::check_tuning_device(tuning, cfg); !st) return fmt::print(stderr, "error: {}\n", st.err().message), 2;
  auto model = load_model_config(cfg.model.model_dir);
  if (!model) return fmt::print(stderr, "error: {}\n", model.err().message), 2;
  fmt::print("bench_latency: {}\n", bench::command_line_text(argc, argv));
  double start_s = 0;
  auto eng = tuning.flags.empty() ? bench::start_engine(cfg, start_s) : bench::start_engine(cfg, tuning.tuning, start_s);
  if (!eng) return fmt::print(stderr, "error: {}\n", eng.err().message), 1;
  fmt::print("model {} ({} layers, hidden {}), device {}, engine start {:.2f} s; prompt {} tokens, output {} tokens\n",
             cfg.model.model_dir, model->num_layers, model->hidden_size, to_string(cfg.executor.device), start_s,
             o.input_len, o.output_len);
  std::fflush(stdout);
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  std::vector<double> latencies, ttfts, decode_rates, gaps;
  actors::engine_stats timed_before;
  for (int64_t i = 0; i < o.num_warmup + o.num_iters; ++i) {
    if (i == o.num_warmup) timed_before = eng.value()->stats();
    auto rec = run_one(*eng.value(), o, model->vocab_size, rng, i);
    if (!rec) return fmt::print(stderr, "error: iteration {}: {}\n", i, rec.err().message), 1;
    if (i < o.num_warmup) continue;
    const auto& t = rec->token_times_s;
    latencies.push_back(rec->finish_s);
    ttfts.push_back(rec->first_token_s);
    if (t.size() >= 2) decode_rates.push_back(double(t.size() - 1) / std::max(t.back() - t.front(), 1e-9));
    for (size_t k = 1; k < t.size(); ++k) gaps.push_back(1000.0 * (t[k] - t[k - 1]));
    fmt::print("iteration {}: {:.3f} s, {} tokens, TTFT {:.1f} ms\n", i - o.num_warmup, rec->finish_s, rec->output_len,
               1000.0 * rec->first_token_s);
  }
  const actors::engine_stats timed_after = eng.value()->stats();
  eng.value()->shutdown(std::chrono::milliseconds(0));
  const auto lat = bench::summarize(latencies);
  fmt::print("Avg latency: {:.6f} seconds\n", lat.mean);
  for (double p : {10.0, 25.0, 50.0, 75.0, 90.0, 99.0})
    fmt::print("{:.0f}% percentile latency: {:.6f} seconds\n", p, bench::percentile(latencies, p));
  const auto ttft = bench::summarize(ttfts);
  const auto gap = bench::summarize(gaps);
  const auto rate = bench::summarize(decode_rates);
  fmt::print("Time to first token:      mean {:.2f} ms, median {:.2f} ms\n", 1000 * ttft.mean, 1000 * ttft.median);
  fmt::print("Output tokens/s:          {:.2f} (end to end, incl. prefill)\n",
             double(o.output_len) / std::max(lat.mean, 1e-9));
  fmt::print("Decode tokens/s:          {:.2f} (after the first token)\n", rate.mean);
  fmt::print("Per-token latency (ms):   p50 {:.2f}, p90 {:.2f}, p99 {:.2f}, mean {:.2f}, max {:.2f} ({} gaps)\n",
             gap.median, gap.p90, gap.p99, gap.mean, gap.max, gap.count);
  fmt::print("Async scheduling:         {}\n{}", cfg.scheduler.async_scheduling ? "on" : "off",
             bench::gpu_idle_lines(timed_before, timed_after));
  return 0;
}
