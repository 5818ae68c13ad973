// The CUDA executor on each attention backend and block size (--paged-kv-cache-type,
// --block-size) against the llama-hd128-bf16 reference.json (HF transformers fp32): logits at the
// last prompt position and greedy decode through CUDA graphs; a batch of all the prompts decoded
// together must give each sequence the tokens it got alone. Bad block sizes fail at start.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "reference_json.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

struct backend_param {
  kv_cache_layout layout;
  int block_size;
};

class CudaExecutorBackend : public ::testing::TestWithParam<backend_param> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaExecutorBackend, ReferenceLogitsAndGreedyTokens) {
  const auto [layout, bs] = GetParam();
  const std::string dir = model_dir("llama-hd128-bf16");
  const auto cases = read_reference(dir);
  ASSERT_FALSE(cases.empty());
  gpu::cuda_executor_options o = test_options();
  o.kv_layout = layout;
  o.block_size = bs;
  o.num_blocks_override = 8192 / bs;
  auto made = gpu::make_cuda_executor(dir, o);
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& ex = *made.value();
  EXPECT_EQ(ex.info().block_size, bs);
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  ASSERT_NE(probe, nullptr);
  std::vector<int32_t> perm(size_t(ex.info().num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  // Every case alone: prompt, then greedy steps.
  std::vector<std::vector<int32_t>> alone, tables;
  size_t next = 0;
  for (const ref_case& c : cases) {
    const int len = int(c.prompt_ids.size()), steps = int(c.greedy_ids.size());
    const size_t nb = size_t(len + steps + bs - 1) / bs;
    ASSERT_LE(next + nb, perm.size());
    std::vector<int32_t> blocks(perm.begin() + long(next), perm.begin() + long(next + nb));
    next += nb;
    gpu::step_batch b;
    b.seqs.push_back(greedy(1, 0, c.prompt_ids, blocks));
    auto r = run_step(ex, b);
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    const double err = rel_max_err(probe->last_logits().at(0), c.last_logits);
    EXPECT_LT(err, 2e-2) << to_string(layout) << " bs " << bs << " prompt length " << len;
    std::vector<int32_t> gen = {r.tokens.at(0).token_id};
    for (int k = 1; k < steps; ++k) {
      gpu::step_batch d;
      d.seqs.push_back(greedy(1, len + k - 1, {gen.back()}, blocks));
      auto rd = run_step(ex, d);
      ASSERT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
      gen.push_back(rd.tokens.at(0).token_id);
    }
    for (int k = 0; k < steps && c.margins[k] >= 5e-2; ++k) {
      EXPECT_EQ(gen[k], c.greedy_ids[k]) << to_string(layout) << " bs " << bs << " prompt " << len << " step " << k;
      if (gen[k] != c.greedy_ids[k]) break;
    }
    std::printf("%s bs %d prompt %d: logits err %.3g\n", to_string(layout), bs, len, err);
    alone.push_back(gen);
    tables.push_back(blocks);
  }
  // All cases decoded together from their cached prompts: the same tokens as alone, step by step,
  // wherever the reference margin allows (one batched step per generated token).
  const size_t steps = alone[0].size();
  for (size_t k = 1; k < steps; ++k) {
    gpu::step_batch d;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (k < alone[i].size())
        d.seqs.push_back(greedy(i + 1, int32_t(cases[i].prompt_ids.size() + k - 1), {alone[i][k - 1]}, tables[i]));
    }
    auto rd = run_step(ex, d);
    ASSERT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
    for (size_t j = 0; j < rd.tokens.size(); ++j) {
      const size_t i = rd.tokens[j].seq_id - 1;
      if (cases[i].margins[k] >= 5e-2) {
        EXPECT_EQ(rd.tokens[j].token_id, alone[i][k]) << "case " << i << " step " << k;
      }
    }
  }
  EXPECT_GT(probe->graph_replays(), 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaExecutorBackend,
                         ::testing::Values(backend_param{kv_cache_layout::vllm, 8},
                                           backend_param{kv_cache_layout::vllm, 32},
                                           backend_param{kv_cache_layout::flash_decoding, 64},
                                           backend_param{kv_cache_layout::flash_decoding, 256}),
                         [](const auto& info) {
                           return std::string(info.param.layout == kv_cache_layout::vllm ? "vllm_" : "flash_decoding_") +
                                  std::to_string(info.param.block_size);
                         });

TEST(CudaExecutorBackendStart, BlockSizeOutsideTheBackendFailsAtStart) {
  AS_REQUIRE_CUDA();
  gpu::cuda_executor_options o = test_options();
  o.kv_layout = kv_cache_layout::flash_decoding;
  o.block_size = 16;
  auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.err().message.find("--block-size 16"), std::string::npos) << made.err().message;
}

}  // namespace
}  // namespace actorserve::testing
