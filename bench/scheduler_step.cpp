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

/// Microseconds of one decision, split by phase.
struct timing {
  double plan = 0, reserve = 0, answer = 0;
  double total() const { return plan + reserve + answer; }
};

double us_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// One full step; times the decision only (plan .. step batch ready), not the fake execution.
timing step(scheduler_policy& sched, block_pool& pool) {
  timing t;
  auto t0 = clock_type::now();
  auto r = sched.plan();
  auto t1 = clock_type::now();
  t.plan = us_between(t0, t1);
  std::optional<gpu::step_batch> batch;
  while (r) {
    t0 = clock_type::now();
    auto ans = pool.reserve(*r);
    t1 = clock_type::now();
    auto d = sched.on_answer(ans);
    const auto t2 = clock_type::now();
    t.reserve += us_between(t0, t1);
    t.answer += us_between(t1, t2);
    r = std::move(d.retry);
    batch = std::move(d.step);
  }
  if (batch) sched.on_step_done(fake_result(*batch));
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
  std::vector<double> total, plan, reserve, answer;
  for (int i = 0; i < iterations; ++i) {
    const timing t = step(sched, pool);
    total.push_back(t.total());
    plan.push_back(t.plan);
    reserve.push_back(t.reserve);
    answer.push_back(t.answer);
  }
  std::sort(total.begin(), total.end());
  const auto c = pool.counts();
  if (sched.counters().num_preemptions != 0) std::printf("warning: preemptions happened during the run\n");
  std::printf("scheduler_step: %d running sequences, %d decisions: median %.1f us (p90 %.1f, min %.1f); "
              "phases (medians): plan %.1f, block reservation %.1f, grant + step batch %.1f us; pool %lld/%lld used\n",
              static_cast<int>(sched.num_running()), iterations, total[total.size() / 2], total[total.size() * 9 / 10],
              total.front(), median(plan), median(reserve), median(answer), static_cast<long long>(c.used),
              static_cast<long long>(c.total));
  return 0;
}
