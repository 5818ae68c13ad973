// Cascade attention through the CUDA executor (flash-decoding, 64-token blocks): sequences whose
// block tables start with the same prompt blocks (prefix-cache hits) decode greedily together,
// by two executors, cascade on and --disable-cascade-attn, fed the same tokens: the logits must be
// close and the greedy tokens equal wherever the top-2 margin is clear, with CUDA graphs and
// eagerly, and only the cascade executor reports cascade sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

/// One executor of the comparison: flash-decoding at 64-token blocks, cascade on or off.
std::unique_ptr<gpu::executor> make_executor(bool cascade, bool eager) {
  gpu::cuda_executor_options o = test_options(eager);
  o.kv_layout = kv_cache_layout::flash_decoding;
  o.block_size = 64;
  o.num_blocks_override = 256;
  o.cascade_attention = cascade;
  auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  EXPECT_TRUE(made.ok()) << made.err().message;
  return made.ok() ? std::move(made.value()) : nullptr;
}

/// Runs `b` on both executors; the sampled tokens of the one without cascade, and every sampled
/// row's logits compared (tokens too wherever that row's top-2 margin is clear). Returns the
/// cascade executor's cascade_seqs.
int32_t step_both(gpu::executor& with, gpu::executor& without, const gpu::step_batch& b, std::vector<int32_t>& tokens,
                  double& worst) {
  const gpu::step_result rw = run_step(with, b), ro = run_step(without, b);
  EXPECT_TRUE(rw.outcome.ok()) << rw.outcome.err().message;
  EXPECT_TRUE(ro.outcome.ok()) << ro.outcome.err().message;
  EXPECT_EQ(ro.cascade_seqs, 0);
  const auto lw = dynamic_cast<gpu::cuda_executor_probe&>(with).last_logits();
  const auto lo = dynamic_cast<gpu::cuda_executor_probe&>(without).last_logits();
  EXPECT_EQ(lw.size(), lo.size());
  EXPECT_EQ(rw.tokens.size(), ro.tokens.size());
  tokens.clear();
  for (size_t i = 0; i < std::min(lw.size(), lo.size()); ++i) {
    worst = std::max(worst, rel_max_err(lw[i], lo[i]));
    if (i < rw.tokens.size() && i < ro.tokens.size() && top2_margin(lo[i]) >= 5e-2) {
      EXPECT_EQ(rw.tokens[i].token_id, ro.tokens[i].token_id) << "row " << i;
    }
  }
  for (const auto& t : ro.tokens) tokens.push_back(t.token_id);
  return rw.cascade_seqs;
}

/// A 320-token shared prompt (5 blocks) prefilled by sequence 0; sequences 1..n-1 hit it in the
/// prefix cache (the same 5 blocks first) and prefill their own 7 + i tokens; then all decode
/// `steps` tokens together, both executors fed the same tokens (those sampled without cascade).
void shared_prompt_decode(bool eager, int n, int steps) {
  constexpr int bs = 64, prompt_len = 320;
  const auto with = make_executor(true, eager), without = make_executor(false, eager);
  ASSERT_TRUE(with && without);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, with->info().vocab_size - 1);
  std::vector<int32_t> prompt(prompt_len);
  for (int32_t& t : prompt) t = tok(rng);
  std::vector<int32_t> perm(256);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(9));
  size_t next = 5;
  const std::vector<int32_t> shared(perm.begin(), perm.begin() + 5);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n), shared);
  std::vector<int32_t> lens(static_cast<size_t>(n)), last(static_cast<size_t>(n)), sampled;
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> own(size_t(i == 0 ? 0 : 7 + i));
    for (int32_t& t : own) t = tok(rng);
    lens[size_t(i)] = prompt_len + int32_t(own.size());
    const int need = (lens[size_t(i)] + steps + bs - 1) / bs;
    while (int(tables[size_t(i)].size()) < need) tables[size_t(i)].push_back(perm[next++]);
    gpu::step_batch b;
    b.seqs.push_back(i == 0 ? greedy(1, 0, prompt, tables[0]) : greedy(uint64_t(i + 1), prompt_len, own, tables[size_t(i)]));
    step_both(*with, *without, b, sampled, worst);
    ASSERT_EQ(sampled.size(), 1u);
    last[size_t(i)] = sampled[0];
  }
  int32_t cascade_seqs = 0;
  for (int k = 0; k + 1 < steps; ++k) {
    gpu::step_batch d;
    for (int i = 0; i < n; ++i)
      d.seqs.push_back(greedy(uint64_t(i + 1), lens[size_t(i)] + k, {last[size_t(i)]}, tables[size_t(i)]));
    cascade_seqs += step_both(*with, *without, d, sampled, worst);
    ASSERT_EQ(sampled.size(), size_t(n));
    last = sampled;
  }
  std::printf("cascade eager %d n %d: %d cascade sequence-steps, logits max rel err %.3g\n", int(eager), n,
              cascade_seqs, worst);
  EXPECT_EQ(cascade_seqs, n * (steps - 1)) << "every decode step groups all the sequences";
  EXPECT_LT(worst, 2e-2);
}

TEST(CudaExecutorCascade, GreedyTokensAndLogitsEqualThePerSequencePath) {
  AS_REQUIRE_CUDA();
  for (bool eager : {false, true})
    for (int n : {2, 9}) {
      SCOPED_TRACE(::testing::Message() << "eager " << eager << " n " << n);
      shared_prompt_decode(eager, n, 12);
    }
}

}  // namespace
}  // namespace actorserve::testing
