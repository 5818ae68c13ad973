// Micro-benchmark: one scheduling decision (plan -> block reservation -> grant applied -> step
// batch built) with 1,024 running sequences in decode, prefix caching on. Prints the median.
//   bench_scheduler_step [num_seqs=1024] [iterations=300]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/scheduler_policy.hpp"

using namespace actorserve;
using namespace actorserve::actors;
using clock_type = std::chrono::steady_clock;

namespace {

gpu::step_result fake_result(const gpu::step_batch& b) {
  gpu::step_result r;
  r.step_id = b.step_id;
  for (const auto& s : b.seqs) {
    if (s.sample) r.tokens.push_back({s.seq_id, static_cast<int32_t>(3 + (s.seq_id * 31 + s.num_computed) % 900), -1.0f, {}});
  }
  return r;
}

/// One full step; returns the microseconds of the decision (plan .. batch ready) only.
double step(scheduler_policy& sched, block_pool& pool) {
  const auto t0 = clock_type::now();
  auto r = sched.plan();
  std::optional<gpu::step_batch> batch;
  while (r) {
    auto d = sched.on_answer(pool.reserve(*r));
    r = std::move(d.retry);
    batch = std::move(d.step);
  }
  const auto t1 = clock_type::now();
  if (batch) sched.on_step_done(fake_result(*batch));
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int num_seqs = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 300;
  scheduler_config cfg;
  cfg.max_num_seqs = num_seqs;
  cfg.max_num_batched_tokens = std::max(2048, num_seqs);
  cfg.block_size = 16;
  cfg.enable_prefix_caching = true;
  cfg.eos_token_ids = {1};
  scheduler_policy sched(cfg);
  // Room for every sequence to grow through the whole run: no preemption in the measurement.
  const int blocks_per_seq = (128 + 50 + iterations) / cfg.block_size + 2;
  block_pool pool(num_seqs * blocks_per_seq, cfg.block_size, true);
  auto params = std::make_shared<sampling_params>();
  params->max_tokens = 1 << 20;
  params->ignore_eos = true;
  params->temperature = 0.0f;
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(64 + i % 64));
    for (size_t j = 0; j < prompt.size(); ++j) prompt[j] = static_cast<int32_t>(2 + (i * 131 + j * 7) % 1000);
    sched.add({static_cast<uint64_t>(i), std::move(prompt), params, static_cast<uint64_t>(i), 0});
  }
  // Prefill everyone, then decode a while so that tables have grown.
  while (sched.num_waiting() > 0) step(sched, pool);
  for (int i = 0; i < 50; ++i) step(sched, pool);
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) us.push_back(step(sched, pool));
  std::sort(us.begin(), us.end());
  const auto c = pool.counts();
  if (sched.counters().num_preemptions != 0) std::printf("warning: preemptions happened during the run\n");
  std::printf("scheduler_step: %d running sequences, %d decisions: median %.1f us, p90 %.1f us, min %.1f us "
              "(pool %lld/%lld blocks used)\n",
              static_cast<int>(sched.num_running()), iterations, us[us.size() / 2], us[us.size() * 9 / 10], us.front(),
              static_cast<long long>(c.used), static_cast<long long>(c.total));
  return 0;
}
