// bench_throughput: offline throughput as vLLM's benchmark_throughput measures it. N prompts of
// random token ids (input length I, output length O, ignore_eos) are submitted at once through
// the actor engine; prints `Throughput: X requests/s, Y total tokens/s, Z output tokens/s`.
//
// --random-prefix-len P: every prompt starts with the same P tokens (one system prompt), computed
// once by an untimed request before the timed batch, so the batch finds them in the prefix cache.
// --preset shared-system-prompt: issue #37's chat workload for cascade attention, 256 streams
// behind one 4096-token system prompt with 128-token user turns and 512-token answers; A/B it
// with --disable-cascade-attn.
//
// --verify-against-unconstrained (preemption stress): runs the prompts greedily under the given
// (small) KV pool, then again on a second engine with ample blocks, and checks that every output
// is identical; prints preemptions and recomputed tokens.
//   bench_throughput --model DIR --input-len 128 --output-len 128 --num-prompts 100
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "bench/common/bench_cli.hpp"
#include "bench/common/engine_runner.hpp"
#include "bench/common/tuning_args.hpp"
#include "bench/common/shared_prefix.hpp"
#include "actors/engine.hpp"
#include "bench/common/stats.hpp"
#include "config/model_config.hpp"
#include "gpu/executor_factory.hpp"

namespace {

using namespace actorserve;

struct options {
  bench::workload_lengths w{1000, 0, 1024, 128};
  int64_t seed = 0, unconstrained_blocks = 0;
  std::string preset;
  double temperature = 1.0, timeout_s = 3600;
  bool verify = false, one_by_one = false;
  bench::tuning_args tuning;  ///< the CUDA kernel choices (bench/cuda/tuning_flags.hpp) for A/B runs of one build
};

std::vector<actors::generation_request> make_requests(const options& o, int64_t vocab) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  const std::vector<int32_t> prefix = bench::shared_prefix_ids(o.seed, o.w.prefix_len, vocab);
  std::vector<actors::generation_request> reqs;
  for (int64_t i = 0; i < o.w.num_prompts; ++i) {
    actors::generation_request r;
    r.request_id = fmt::format("bench-{}", i);
    r.prompt_ids = bench::prefixed_prompt(prefix, rng, static_cast<int32_t>(o.w.input_len), vocab);
    r.params.max_tokens = static_cast<int32_t>(o.w.output_len);
    r.params.ignore_eos = true;
    r.params.temperature = o.verify ? 0.0f : static_cast<float>(o.temperature);
    r.params.seed = static_cast<uint64_t>(o.seed + i);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

/// Offline engine limits unless the command line sets them (the server keeps 256 / 2048): vLLM's
/// LLM class takes max_num_batched_tokens 16384 and max_num_seqs 1024 on GPUs of >= 70 GB
/// (EngineArgs.get_batch_defaults). Here the sequences are capped at 512, which measured faster
/// than 1024 on the H200, and the token budget is 65536, which measured 2-4 % faster than 16384
/// on 200 x 1000 / 100 and the same on 1000 x 128 / 1024 (bench/README.md, "Offline engine
/// limits").
constexpr int64_t kOfflineMaxNumSeqs = 512, kOfflineMaxNumBatchedTokens = 65536;

/// Runs the requests on a fresh engine; prints the vLLM throughput line and engine counters.
result<bench::run_report> run_once(const engine_config& cfg, const options& o, int64_t vocab, const char* label) {
  double start_s = 0;
  auto eng = o.tuning.flags.empty() ? bench::start_engine(cfg, start_s)
                                    : bench::start_engine(cfg, o.tuning.tuning, start_s);
  if (!eng) return eng.err();
  if (o.w.prefix_len > 0) {   // the system prompt, cached before the clock starts
    actors::generation_request warm;
    warm.request_id = "bench-prefix";
    warm.prompt_ids = bench::shared_prefix_ids(o.seed, o.w.prefix_len, vocab);
    warm.params.max_tokens = 1;
    warm.params.ignore_eos = true;
    std::vector<actors::generation_request> one;
    one.push_back(std::move(warm));
    auto w = bench::run_requests(*eng.value(), std::move(one), false, o.timeout_s);
    if (!w) return w.err();
    if (w->num_failed > 0) {
      eng.value()->shutdown(std::chrono::milliseconds(0));
      return make_error(error_code::invalid_argument,
                        fmt::format("the shared prefix of {} tokens failed: {}", o.w.prefix_len,
                                    bench::first_failure(w.value())));
    }
    fmt::print("[{}] shared prefix: {} tokens computed by an untimed request in {:.2f} s\n", label, o.w.prefix_len,
               w->elapsed_s);
  }
  auto rep = bench::run_requests(*eng.value(), make_requests(o, vocab), o.verify, o.timeout_s, o.one_by_one);
  eng.value()->shutdown(std::chrono::milliseconds(0));
  if (!rep) return rep.err();
  const auto& r = rep.value();
  int64_t prompt_tokens = 0, output_tokens = 0, completed = 0;
  std::vector<double> latencies;
  for (const auto& q : r.requests) {
    prompt_tokens += q.prompt_len;
    output_tokens += q.output_len;
    latencies.push_back(q.finish_s);
    completed += q.finish == actors::finish_reason::length || q.finish == actors::finish_reason::stop;
  }
  const double t = std::max(r.elapsed_s, 1e-9);
  fmt::print("[{}] engine start: {:.2f} s; {} requests, {} failed\n", label, start_s, r.requests.size(), r.num_failed);
  if (r.num_failed > 0) fmt::print("[{}] first failure: {}\n", label, bench::first_failure(r));
  if (r.timed_out)
    fmt::print("TIMED OUT after {:.0f} s: the unfinished requests were cancelled; figures cover the tokens generated "
               "until then\n",
               o.timeout_s);
  fmt::print("Throughput: {:.2f} requests/s, {:.2f} total tokens/s, {:.2f} output tokens/s\n",
             double(completed) / t, double(prompt_tokens + output_tokens) / t, double(output_tokens) / t);
  fmt::print("Total num prompt tokens:  {}\nTotal num output tokens:  {}\n", prompt_tokens, output_tokens);
  fmt::print("Elapsed time:             {:.2f} s (request latency median {:.2f} s, max {:.2f} s)\n", r.elapsed_s,
             bench::percentile(latencies, 50), bench::percentile(latencies, 100));
  const auto& a = r.after;
  const auto& b = r.before;
  fmt::print("KV blocks:                {} total, peak {} used ({:.1f}%); peak running {}\n", a.kv_blocks_total,
             r.peak_kv_blocks_used, 100.0 * double(r.peak_kv_blocks_used) / double(std::max<int64_t>(a.kv_blocks_total, 1)),
             r.peak_running);
  fmt::print("Preemptions:              {} ({} tokens recomputed)\n", a.num_preemptions - b.num_preemptions,
             a.num_recomputed_tokens - b.num_recomputed_tokens);
  fmt::print("Engine steps:             {} ({:.1f} output tokens/step, {:.2f} ms/step)\n", a.num_steps - b.num_steps,
             double(output_tokens) / double(std::max<int64_t>(a.num_steps - b.num_steps, 1)),
             1000.0 * t / double(std::max<int64_t>(a.num_steps - b.num_steps, 1)));
  fmt::print("Cascade attention:        {} ({} sequence-steps through a shared-prefix pass)\n",
             cfg.executor.cascade_attention ? "on" : "off (--disable-cascade-attn)", a.cascade_seqs - b.cascade_seqs);
  fmt::print("Async scheduling:         {}\n{}{}", cfg.scheduler.async_scheduling ? "on" : "off",
             bench::gpu_idle_lines(b, a), bench::step_phase_lines(b, a));
  fmt::print("{}", bench::outside_steps_line(b, a, r.elapsed_s));
  std::fflush(stdout);
  return rep;
}

/// Compares the constrained run's greedy outputs with the unconstrained run's.
int compare_outputs(const bench::run_report& small, const bench::run_report& ample) {
  int64_t same = 0, shown = 0;
  for (size_t i = 0; i < small.requests.size(); ++i) {
    const auto& x = small.requests[i].output_ids;
    const auto& y = ample.requests[i].output_ids;
    if (x == y && !x.empty()) {
      ++same;
      continue;
    }
    size_t k = 0;
    while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
    if (shown++ < 5)
      fmt::print("verify: request {} differs at output token {} ({} vs {} tokens; preempted {} times)\n",
                 small.requests[i].request_id, k, x.size(), y.size(), small.requests[i].usage.num_preemptions);
  }
  fmt::print("verify: {}/{} greedy outputs identical to the unconstrained run\n", same, small.requests.size());
  return same == static_cast<int64_t>(small.requests.size()) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::vector<bench::bench_option> own{
      {"--input-len", "prompt tokens per request", &o.w.input_len},
      {"--output-len", "generated tokens per request (ignore_eos)", &o.w.output_len},
      {"--num-prompts", "number of requests", &o.w.num_prompts},
      {"--random-prefix-len", "tokens of one shared prefix every prompt starts with, cached by an untimed request first",
       &o.w.prefix_len},
      {"--preset", "shared-system-prompt: 256 prompts behind one 4096-token prefix, 128 in / 512 out (issue #37)",
       &o.preset},
      {"--temperature", "sampling temperature (0: greedy)", &o.temperature},
      {"--bench-seed", "seed of the random prompts and of each request's sampler", &o.seed},
      {"--timeout", "give up after this many seconds", &o.timeout_s},
      {"--submit-one-by-one", "submit each request on its own (an A/B of engine::submit_batch)", &o.one_by_one},
      {"--verify-against-unconstrained",
       "greedy; rerun on an engine with ample KV blocks and require identical outputs", &o.verify},
      {"--unconstrained-blocks", "KV blocks of the verifying engine (0: what the device holds)",
       &o.unconstrained_blocks},
  };
  o.tuning = bench::split_tuning_flags(argc, argv);
  auto cl = bench::parse_bench_command_line("Offline throughput through the actor engine (vLLM benchmark_throughput)",
                                            own, true, int(o.tuning.rest.size()), o.tuning.rest.data());
  if (!cl) return fmt::print(stderr, "error: {}\n", cl.err().message), 2;
  if (cl->exit_now) return fmt::print("{}", cl->output), 0;
  engine_config& cfg = cl->engine;
  if (auto st = bench::apply_preset(o.preset, argc, argv, o.w); !st)
    return fmt::print(stderr, "error: {}\n", st.err().message), 2;
  if (!bench::has_flag(argc, argv, "--max-num-seqs")) cfg.scheduler.max_num_seqs = kOfflineMaxNumSeqs;
  if (!bench::has_flag(argc, argv, "--max-num-batched-tokens"))
    cfg.scheduler.max_num_batched_tokens = kOfflineMaxNumBatchedTokens;
  if (auto st = validate(cfg); !st) return fmt::print(stderr, "error: {}\n", st.err().message), 2;
  if (auto st = bench::check_tuning_device(o.tuning, cfg); !st)
    return fmt::print(stderr, "error: {}\n", st.err().message), 2;
  if (o.w.input_len < 1 || o.w.output_len < 1 || o.w.num_prompts < 1 || o.w.prefix_len < 0)
    return fmt::print(stderr, "error: --input-len, --output-len and --num-prompts must be positive, "
                              "--random-prefix-len not negative\n"),
           2;
  auto model = load_model_config(cfg.model.model_dir);
  if (!model) return fmt::print(stderr, "error: {}\n", model.err().message), 2;
  fmt::print("bench_throughput: {}\n", bench::command_line_text(argc, argv));
  fmt::print("model {} ({} layers, hidden {}, vocab {}), device {}, {} prompts x {}{} in / {} out{}\n",
             cfg.model.model_dir, model->num_layers, model->hidden_size, model->vocab_size,
             to_string(cfg.executor.device), o.w.num_prompts,
             o.w.prefix_len > 0 ? fmt::format("{} shared + ", o.w.prefix_len) : std::string(), o.w.input_len,
             o.w.output_len,
             o.verify ? ", greedy, verified against an unconstrained run" : "");
  fmt::print("engine limits: --max-num-seqs {} --max-num-batched-tokens {}\n", cfg.scheduler.max_num_seqs,
             cfg.scheduler.max_num_batched_tokens);
  if (o.verify && cfg.cache.num_gpu_blocks_override) {
    const int64_t bs = gpu::block_size_for(cfg);
    const int64_t per_req = (o.w.prefix_len + o.w.input_len + o.w.output_len + bs - 1) / bs;
    fmt::print("KV demand: {} blocks per request, {} for all at once; pool capped at {} blocks\n", per_req,
               per_req * o.w.num_prompts, *cfg.cache.num_gpu_blocks_override);
    if (per_req > *cfg.cache.num_gpu_blocks_override)
      fmt::print("warning: one request needs more blocks than the pool holds\n");
  }
  std::fflush(stdout);
  auto small = run_once(cfg, o, model->vocab_size, o.verify ? "constrained" : "run");
  if (!small) return fmt::print(stderr, "error: {}\n", small.err().message), 1;
  if (!o.verify) return small->num_failed == 0 && !small->timed_out ? 0 : 1;
  engine_config ample = cfg;
  ample.cache.num_gpu_blocks_override.reset();
  if (o.unconstrained_blocks > 0) ample.cache.num_gpu_blocks_override = o.unconstrained_blocks;
  auto big = run_once(ample, o, model->vocab_size, "unconstrained");
  if (!big) return fmt::print(stderr, "error: {}\n", big.err().message), 1;
  if (big->after.num_preemptions > 0)
    fmt::print("verify: warning: the unconstrained run preempted too ({} times)\n", big->after.num_preemptions);
  const int rc = compare_outputs(small.value(), big.value());
  fmt::print("Preemption stress: {} preemptions, {} recomputed tokens, {:.2f} output tokens/s constrained vs "
             "{:.2f} unconstrained\n",
             small->after.num_preemptions - small->before.num_preemptions,
             small->after.num_recomputed_tokens - small->before.num_recomputed_tokens,
             double(o.w.num_prompts * o.w.output_len) / std::max(small->elapsed_s, 1e-9),
             double(o.w.num_prompts * o.w.output_len) / std::max(big->elapsed_s, 1e-9));
  return rc != 0 || small->num_failed > 0 || big->num_failed > 0 || small->timed_out || big->timed_out ? 1 : 0;
}
