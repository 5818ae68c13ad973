// The real engine over --device cuda --tensor-parallel-size 2 (GPU suite, two GPUs): the executor
// factory's group of two shard executors, NCCL and the one-shot all-reduce between them, driven in
// lock-step, against one GPU on the same random prompts; greedy tokens may part only at a
// near-tie (near_tie.hpp), and a failure injected into the group's step 5 restarts the group.
// Skips with fewer than two GPUs.
#include <gtest/gtest.h>

#include <cstdio>

#include "../engine/engine_harness.hpp"
#include "gpu/cuda/device_info.hpp"
#include "near_tie.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;

engine_config tp_config(int64_t shards) {
  auto cfg = tiny_config(4096);
  cfg.model.model_dir = actorserve::testing::model_dir("qwen3-hd128-bf16");
  cfg.executor.device = device_kind::cuda;
  cfg.executor.tensor_parallel_size = shards;
  cfg.cache.gpu_memory_utilization = 0.5;
  cfg.model.max_model_len = 256;
  return cfg;
}

/// Greedy outputs of `prompts` (8 top logprobs kept where `reference`, for first_parting).
std::map<int, std::map<int32_t, choice_result>> run_greedy(engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                                           bool reference) {
  sampling_params p = greedy(16);
  if (reference) p.num_logprobs = kNearTieTop;
  return run_all(e, prompts, p);
}

class TensorParallelCudaEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  }
};

TEST_F(TensorParallelCudaEngine, TwoGpusKeepOneGpusGreedyOutputsAndRestartAfterAFailure) {
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 64; ++i) prompts.push_back(random_prompt(rng, 4, 60));
  auto one = start_engine(tp_config(1));
  ASSERT_TRUE(one);
  const auto want = run_greedy(*one, prompts, true);
  one->shutdown(std::chrono::milliseconds(0));
  for (const bool inject : {false, true}) {
    SCOPED_TRACE(inject ? "failure injected at step 5" : "undisturbed");
    auto cfg = tp_config(2);
    if (inject) cfg.executor.inject_step_failures = {5};
    auto two = start_engine(cfg);
    ASSERT_TRUE(two);
    const auto got = run_greedy(*two, prompts, false);
    int identical = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& g = got.at(static_cast<int>(i)).at(0);
      const auto& w = want.at(static_cast<int>(i)).at(0);
      identical += g.tokens == w.tokens;
      const parting p = first_parting(w, g.tokens);
      if (p.index >= 0) {
        EXPECT_LT(p.margin, kNearTie) << "request " << i << " parts at token " << p.index << " by " << p.margin;
      }
    }
    const auto s = wait_idle(*two);
    EXPECT_EQ(s.executor_restarts, inject ? 1 : 0);
    EXPECT_EQ(s.kv_blocks_used, 0);
    std::printf("[ figures  ] cuda -tp 2%s: %d/64 requests identical to one GPU, %lld restart(s)\n",
                inject ? " (failure at step 5)" : "", identical, static_cast<long long>(s.executor_restarts));
    two->shutdown(std::chrono::milliseconds(0));
  }
}

}  // namespace
}  // namespace actorserve::actors
