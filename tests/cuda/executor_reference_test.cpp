// The whole CUDA executor against the fixtures' reference.json (HF transformers fp32): logits at
// the last prompt position within 2e-2 relative, greedy tokens identical up to the first step
// whose reference margin is under 5e-2 (bf16/fp16 noise). A mixture-of-experts model may have a
// prompt whose logits are beyond 2e-2 (below 0.5) as CudaVsCpu allows (executor_test_util.hpp):
// a near-tie in its routing taken the other way under 16-bit activations. DeepSeek-V2's
// qlora-yarn fixture has one: at the last row of its 7-token prompt the first sparse layer's second
// and third groups differ by 3.3e-4 in router score (1.9e-3 in logit), and taking the third
// group on the CPU executor moves its logits by 0.040 from transformers'.
// CudaExecutorReferencePortable runs the same comparison with --kernels portable (the kernels of
// GPUs before Hopper) on both KV layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "config/model_config.hpp"
#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "reference_json.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class CudaExecutorReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

/// The fixture's reference cases through an executor made with `opts`.
void expect_reference(const std::string& model, const gpu::cuda_executor_options& opts) {
  const std::string dir = model_dir(model);
  const auto cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 8u) << dir;
  auto made = gpu::make_cuda_executor(dir, opts);
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& ex = *made.value();
  auto cfg = load_model_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const bool routed = cfg->moe.has_value();
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  ASSERT_NE(probe, nullptr);
  std::vector<int32_t> perm(size_t(ex.info().num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  double worst = 0;
  int matched_total = 0, compared_total = 0, over = 0;
  for (const ref_case& c : cases) {
    std::shuffle(perm.begin(), perm.end(), rng);
    const int len = int(c.prompt_ids.size()), steps = int(c.greedy_ids.size());
    std::vector<int32_t> blocks(perm.begin(), perm.begin() + (len + steps + 15) / 16);
    gpu::step_batch b;
    b.seqs.push_back(greedy(1, 0, c.prompt_ids, blocks));
    auto r = run_step(ex, b);
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    ASSERT_EQ(r.tokens.size(), 1u);
    const auto logits = probe->last_logits();
    ASSERT_EQ(logits.size(), 1u);
    const double err = rel_max_err(logits[0], c.last_logits);
    worst = std::max(worst, err);
    over += err >= logits_bound;
    EXPECT_LT(err, routed ? rerouted_logits_bound : logits_bound) << model << " prompt length " << len;
    std::vector<int32_t> gen = {r.tokens[0].token_id};
    for (int k = 1; k < steps; ++k) {
      gpu::step_batch d;
      d.step_id = uint64_t(k);
      d.seqs.push_back(greedy(1, len + k - 1, {gen.back()}, blocks));
      auto rd = run_step(ex, d);
      ASSERT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
      gen.push_back(rd.tokens.at(0).token_id);
    }
    int matched = 0;
    for (int k = 0; k < steps && c.margins[k] >= 5e-2; ++k) {
      EXPECT_EQ(gen[k], c.greedy_ids[k]) << model << " prompt length " << len << " step " << k;
      if (gen[k] != c.greedy_ids[k]) break;
      ++matched;
    }
    int comparable = 0;
    while (comparable < steps && c.margins[comparable] >= 5e-2) ++comparable;
    matched_total += matched;
    compared_total += comparable;
    std::printf("%s prompt %4d: logits max abs err / max abs ref %.3g; greedy %d/%d steps matched "
                "(%d before the first margin < 5e-2)\n", model.c_str(), len, err, matched, steps, comparable);
  }
  std::printf("%s: worst logits error %.3g (%d of %zu prompts beyond %g), greedy steps matched %d of %d "
              "comparable; graph replays %lld\n",
              model.c_str(), worst, over, cases.size(), logits_bound, matched_total, compared_total,
              (long long)probe->graph_replays());
  EXPECT_LE(over, routed ? rerouted_rows_allowed(int(cases.size())) : 0)
      << model << ": prompts beyond " << logits_bound;
  EXPECT_GT(probe->graph_replays(), 0);
}

TEST_P(CudaExecutorReference, LogitsAndGreedyTokensMatchReference) { expect_reference(GetParam(), test_options()); }

class CudaExecutorReferencePortable : public CudaExecutorReference {};

/// --kernels portable: the cp.async decode kernels, the mma.sync prefill, the register GEMVs and
/// plain launches, on the vllm layout (16-token blocks) and flash-decoding (64-token blocks).
TEST_P(CudaExecutorReferencePortable, LogitsAndGreedyTokensMatchReference) {
  for (const auto& [layout, block] :
       {std::pair{kv_cache_layout::vllm, 16}, std::pair{kv_cache_layout::flash_decoding, 64}}) {
    SCOPED_TRACE(block == 16 ? "vllm layout" : "flash-decoding layout");
    gpu::cuda_executor_options o = test_options();
    o.kernels = kernel_choice::portable;
    o.kv_layout = layout;
    o.block_size = block;
    expect_reference(GetParam(), o);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExecutorReference, ::testing::ValuesIn(executor_fixtures()), model_param_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExecutorReferencePortable, ::testing::ValuesIn(executor_fixtures()),
                         model_param_name);

}  // namespace
}  // namespace actorserve::testing
