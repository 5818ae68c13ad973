// Async scheduling on the CUDA executor (GPU suite): decode tokens resolved on the device from
// the previous step's sampler output give the same greedy and seeded outputs as the one-step
// engine, eager and through the decode CUDA graphs, also under preemption, up to rounding flips
// (near_tie.hpp: the kernels are not batch-invariant). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "../engine/engine_harness.hpp"
#include "gpu/cuda/device_info.hpp"
#include "near_tie.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;

engine_config async_cuda_config(std::optional<int64_t> num_blocks, bool async, bool eager) {
  auto cfg = tiny_config(num_blocks);
  cfg.executor.device = device_kind::cuda;
  cfg.executor.enforce_eager = eager;
  cfg.cache.gpu_memory_utilization = 0.5;
  cfg.model.max_model_len = 256;  // the tight pool below must hold one sequence of max_model_len
  cfg.scheduler.async_scheduling = async;
  return cfg;
}

/// Request i: greedy when i is even, seeded sampling at temperature 0.8 when odd. `reference`:
/// the greedy ones also keep their top logprobs (where a parting must be a near-tie).
sampling_params mixed(int i, bool reference) {
  sampling_params p = greedy(4 + (i * 7) % 20);
  if (i % 2 == 1) {
    p.temperature = 0.8f;
    p.seed = static_cast<uint64_t>(500 + i);
  }
  if (i % 6 == 1) p.num_logprobs = 3;
  if (reference && i % 2 == 0) p.num_logprobs = kNearTieTop;
  return p;
}

std::map<int, std::map<int32_t, choice_result>> run_mixed(engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                                          bool reference = false) {
  collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int key = static_cast<int>(i);
    auto st = e.submit(make_request("a" + std::to_string(i), prompts[i], mixed(key, reference)), c.sink(key));
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.err().message);
  }
  EXPECT_TRUE(c.wait());
  return c.results();
}

class AsyncCudaEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_F(AsyncCudaEngine, OutputsEqualTheOneStepEngineEagerGraphsAndUnderPreemption) {
  std::mt19937 rng(31);
  std::vector<std::vector<int32_t>> prompts;
  int64_t blocks_needed = 0;
  for (int i = 0; i < 200; ++i) {
    prompts.push_back(random_prompt(rng, 4, 40));
    blocks_needed += (static_cast<int64_t>(prompts.back().size()) + 24 + 15) / 16;
  }
  auto one = start_engine(async_cuda_config(4096, false, false));
  ASSERT_TRUE(one);
  const auto want = run_mixed(*one, prompts, true);
  one->shutdown(std::chrono::milliseconds(0));
  struct variant {
    const char* name;
    int64_t blocks;
    bool eager;
  };
  for (const variant v : {variant{"graphs", 4096, false}, variant{"eager", 4096, true},
                          variant{"tight pool", std::max<int64_t>(blocks_needed / 10, 16), false}}) {
    auto e = start_engine(async_cuda_config(v.blocks, true, v.eager));
    ASSERT_TRUE(e);
    const auto got = run_mixed(*e, prompts);
    // Greedy requests may part only at a near-tie of the reference (near_tie.hpp); a seeded
    // sample flips where its draw falls within a rounding of a boundary between two tokens.
    int same = 0, sampled_parted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& g = got.at(static_cast<int>(i)).at(0);
      const auto& x = want.at(static_cast<int>(i)).at(0);
      EXPECT_EQ(g.tokens.size(), x.tokens.size()) << v.name << ": request " << i;
      EXPECT_EQ(g.finish, x.finish) << v.name << ": request " << i;
      same += g.tokens == x.tokens;
      if (i % 2 == 1) {
        sampled_parted += g.tokens != x.tokens;
        continue;
      }
      const parting p = first_parting(x, g.tokens);
      if (p.index >= 0) {
        EXPECT_LT(p.margin, kNearTie) << v.name << ": greedy request " << i << " parts at token " << p.index
                                      << " by " << p.margin;
      }
    }
    // Up to 4 of the 100 sampled requests parted in 9 runs on H100 and H200 (the tight pool's
    // preemptions recompute by prefill what was decoded); a real fault parts most of them.
    EXPECT_LE(sampled_parted, 6) << v.name << ": more sampled requests parted than rounding flips explain";
    const auto s = wait_idle(*e);
    EXPECT_EQ(s.kv_blocks_used, 0) << v.name << ": blocks leaked";
    EXPECT_GT(s.decode_steps, 0);
    std::printf("[ figures  ] %s: %d/%zu outputs equal, %lld steps, %lld preemptions, decode busy %.1f ms "
                "idle %.1f ms\n",
                v.name, same, prompts.size(), static_cast<long long>(s.num_steps),
                static_cast<long long>(s.num_preemptions), s.decode_busy_us / 1000.0, s.decode_idle_us / 1000.0);
    e->shutdown(std::chrono::milliseconds(0));
  }
}

}  // namespace
}  // namespace actorserve::actors
