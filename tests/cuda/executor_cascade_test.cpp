// Cascade attention through the CUDA executor (flash-decoding, 64-token blocks): sequences whose
// block tables start with the same prompt blocks (prefix-cache hits) decode greedily together,
// with cascade on and with --disable-cascade-attn; the tokens must be equal and the logits close,
// with CUDA graphs and eagerly, and only the cascade executor reports cascade sequences.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

struct decode_run {
  std::vector<std::vector<int32_t>> tokens;   ///< per sequence
  std::vector<std::vector<float>> logits;     ///< every sampled row of every decode step
  int32_t cascade_seqs = 0;
};

/// A 320-token shared prompt (5 blocks) prefilled by sequence 0; sequences 1..n-1 hit it in the
/// prefix cache (the same 5 blocks first) and prefill their own 7 + i tokens; then all decode
/// `steps` greedy tokens together.
decode_run shared_prompt_decode(bool cascade, bool eager, int n, int steps) {
  constexpr int bs = 64, prompt_len = 320;
  gpu::cuda_executor_options o = test_options(eager);
  o.kv_layout = kv_cache_layout::flash_decoding;
  o.block_size = bs;
  o.num_blocks_override = 256;
  o.cascade_attention = cascade;
  auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  EXPECT_TRUE(made.ok()) << made.err().message;
  if (!made.ok()) return {};
  gpu::executor& ex = *made.value();
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, ex.info().vocab_size - 1);
  std::vector<int32_t> prompt(prompt_len);
  for (int32_t& t : prompt) t = tok(rng);
  std::vector<int32_t> perm(256);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(9));
  size_t next = 5;
  const std::vector<int32_t> shared(perm.begin(), perm.begin() + 5);
  decode_run out;
  out.tokens.resize(size_t(n));
  std::vector<std::vector<int32_t>> tables(size_t(n), shared);
  std::vector<int32_t> lens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> own(size_t(i == 0 ? 0 : 7 + i));
    for (int32_t& t : own) t = tok(rng);
    lens[size_t(i)] = prompt_len + int32_t(own.size());
    const int need = (lens[size_t(i)] + steps + bs - 1) / bs;
    while (int(tables[size_t(i)].size()) < need) tables[size_t(i)].push_back(perm[next++]);
    gpu::step_batch b;
    b.seqs.push_back(i == 0 ? greedy(1, 0, prompt, tables[0]) : greedy(uint64_t(i + 1), prompt_len, own, tables[size_t(i)]));
    auto r = run_step(ex, b);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok()) return out;
    out.tokens[size_t(i)].push_back(r.tokens.at(0).token_id);
  }
  for (int k = 0; k + 1 < steps; ++k) {
    gpu::step_batch d;
    for (int i = 0; i < n; ++i)
      d.seqs.push_back(greedy(uint64_t(i + 1), lens[size_t(i)] + k, {out.tokens[size_t(i)].back()}, tables[size_t(i)]));
    auto r = run_step(ex, d);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok()) return out;
    out.cascade_seqs += r.cascade_seqs;
    for (const auto& t : r.tokens) out.tokens[size_t(t.seq_id - 1)].push_back(t.token_id);
    for (const auto& row : probe->last_logits()) out.logits.push_back(row);
  }
  return out;
}

TEST(CudaExecutorCascade, GreedyTokensAndLogitsEqualThePerSequencePath) {
  AS_REQUIRE_CUDA();
  for (bool eager : {false, true}) {
    for (int n : {2, 9}) {
      const decode_run with = shared_prompt_decode(true, eager, n, 12);
      const decode_run without = shared_prompt_decode(false, eager, n, 12);
      EXPECT_GT(with.cascade_seqs, 0) << "eager " << eager << " n " << n;
      EXPECT_EQ(without.cascade_seqs, 0);
      EXPECT_EQ(with.tokens, without.tokens) << "eager " << eager << " n " << n;
      ASSERT_EQ(with.logits.size(), without.logits.size());
      double worst = 0;
      for (size_t r = 0; r < with.logits.size(); ++r) worst = std::max(worst, rel_max_err(with.logits[r], without.logits[r]));
      std::printf("cascade eager %d n %d: %d cascade seqs, logits max rel err %.3g\n", int(eager), n, with.cascade_seqs,
                  worst);
      EXPECT_LT(worst, 2e-2) << "eager " << eager << " n " << n;
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
