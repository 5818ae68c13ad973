// The host half of a CUDA step (gpu/cuda/step/step_builder.hpp): what a step_batch stages into —
// token ids, positions, KV slots, block tables, attention work lists, sampler parameters,
// penalties, masks, the sampled rows — and the steps it refuses. No GPU needed.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cuda/step/step_builder.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::testing {
namespace {

using cuda::staged_step;
using cuda::step_builder;
using cuda::step_limits;

constexpr int kBlock = 16;

step_limits test_limits() {
  step_limits l;
  l.max_rows = 8;
  l.max_tokens = 64;
  l.block_size = kBlock;
  l.vocab_size = 1000;
  l.max_model_len = 256;
  l.num_blocks = 32;
  l.block_table_capacity = 8 * 16;
  l.mask_capacity = 8 * 4;
  l.item_capacity = 64 * 8 + 64;
  l.last_item_capacity = 8 * 8 + 64;
  l.eos_token_ids = {2};
  return l;
}

std::unique_ptr<cuda::attention_backend> backend() {
  cuda::attention_shape shape;
  shape.num_heads = 32;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  shape.block_size = kBlock;
  shape.num_sms = 132;
  auto made = cuda::make_attention_backend(kv_cache_layout::vllm, shape);
  EXPECT_TRUE(made) << (made ? "" : made.err().message);
  return made ? std::move(*made) : nullptr;
}

class StepBuilder : public ::testing::Test {
 protected:
  void SetUp() override {
    attention_ = backend();
    ASSERT_NE(attention_, nullptr);
    builder_ = std::make_unique<step_builder>(test_limits(), *attention_);
  }
  std::unique_ptr<cuda::attention_backend> attention_;
  std::unique_ptr<step_builder> builder_;
  staged_step staged_;
};

TEST_F(StepBuilder, AMixedStepStagesTokensBlocksAndSampledRows) {
  gpu::step_batch b;
  // A prompt chunk of 5 tokens after 14 cached ones (it crosses into its second block), sampled;
  // then a decode whose token is the previous step's sample.
  b.seqs.push_back(greedy(7, 14, {11, 12, 13, 14, 15}, {4, 9}, true));
  b.seqs.push_back(greedy(3, 20, {gpu::previous_token}, {5, 6}, true));
  b.seqs[0].params.temperature = 0.7f;
  b.seqs[0].params.num_logprobs = 50;  // clamped to what the sampler returns
  b.seqs[0].seed = 99;
  b.seqs[0].num_generated = 4;
  b.seqs[1].params.temperature = 0.0f;
  const std::vector<std::pair<uint64_t, int32_t>> previous = {{3, 6}, {5, 1}};
  ASSERT_TRUE(builder_->build(b, previous, staged_).ok());
  const staged_step& s = staged_;
  EXPECT_EQ(s.bucket, 0);  // a prefill: eager
  EXPECT_EQ(s.rows, 6);
  EXPECT_TRUE(s.sampled_only);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{11, 12, 13, 14, 15, 0}));
  EXPECT_EQ(s.positions, (std::vector<int32_t>{14, 15, 16, 17, 18, 20}));
  EXPECT_EQ(s.token_seqs, (std::vector<int32_t>{0, 0, 0, 0, 0, 1}));  // what latent attention reads
  EXPECT_EQ(s.slots, (std::vector<int32_t>{4 * kBlock + 14, 4 * kBlock + 15, 9 * kBlock, 9 * kBlock + 1,
                                           9 * kBlock + 2, 6 * kBlock + 4}));
  // fp32 q: the decode token, and the sampled prompt's last token (the last layer's query).
  EXPECT_EQ(s.q32, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(s.block_tables, (std::vector<int32_t>{4, 9, 5, 6}));
  ASSERT_EQ(s.seqs.size(), 2u);
  EXPECT_EQ(s.seqs[0].q_start, 0);
  EXPECT_EQ(s.seqs[0].q_len, 5);
  EXPECT_EQ(s.seqs[0].context_len, 19);
  EXPECT_EQ(s.seqs[0].bt_offset, 0);
  EXPECT_EQ(s.seqs[1].q_start, 5);
  EXPECT_EQ(s.seqs[1].context_len, 21);
  EXPECT_EQ(s.seqs[1].bt_offset, 2);
  EXPECT_EQ(s.previous, (std::vector<int32_t>{5, 6}));  // row 5 takes sampler row 6 of the last step
  EXPECT_EQ(s.sample_rows, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(s.out_rows, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.seq_ids, (std::vector<uint64_t>{7, 3}));
  EXPECT_EQ(s.num_top, (std::vector<int32_t>{cuda::max_top_logprobs, 0}));
  ASSERT_EQ(s.sample_seqs.size(), 2u);
  EXPECT_FLOAT_EQ(s.sample_seqs[0].temperature, 0.7f);
  EXPECT_EQ(s.sample_seqs[0].seed, 99u);
  EXPECT_EQ(s.sample_seqs[0].counter, 4u);
  EXPECT_EQ(s.sample_seqs[0].num_logprobs, cuda::max_top_logprobs);
  EXPECT_FLOAT_EQ(s.sample_seqs[1].temperature, 0.0f);
  // The last layer: one query per sampled sequence over all of its keys.
  ASSERT_EQ(s.last_seqs.size(), 2u);
  EXPECT_EQ(s.last_seqs[0].q_start, 0);
  EXPECT_EQ(s.last_seqs[0].q_len, 1);
  EXPECT_EQ(s.last_seqs[0].context_len, 19);
  EXPECT_EQ(s.last_seqs[1].q_start, 1);
  EXPECT_GT(s.plan.items.size(), 0u);
  EXPECT_EQ(s.last_plan.num_decode_items, int32_t(s.last_plan.items.size()));
}

TEST_F(StepBuilder, PenaltiesAndSuppressedEosStageTheirRanges) {
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 3, {7}, {0}, true));
  b.seqs[0].params.repetition_penalty = 1.2f;
  b.seqs[0].params.stop_token_ids = {9};
  b.seqs[0].history = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{5, 7, 5, 7});
  b.seqs[0].prompt_len = 2;
  b.seqs[0].suppress_eos = true;
  b.seqs.push_back(greedy(2, 3, {8}, {1}, true));
  ASSERT_TRUE(builder_->build(b, {}, staged_).ok());
  const staged_step& s = staged_;
  // Decode-only: a graph bucket of 2 rows, every row sampled.
  EXPECT_EQ(s.bucket, 2);
  EXPECT_FALSE(s.sampled_only);
  ASSERT_EQ(s.penalties.size(), 2u);  // ids 5 and 7, once each from the prompt and the output
  EXPECT_EQ(s.penalties[0].id, 5);
  EXPECT_EQ(s.penalties[0].output_count, 1);
  EXPECT_EQ(s.penalties[1].id, 7);
  EXPECT_EQ(s.penalties[1].output_count, 1);
  EXPECT_EQ(s.sample_seqs[0].penalty_begin, 0);
  EXPECT_EQ(s.sample_seqs[0].penalty_count, 2);
  EXPECT_EQ(s.masks, (std::vector<int32_t>{2, 9}));  // EOS, then the stop ids
  EXPECT_EQ(s.sample_seqs[0].mask_count, 2);
  EXPECT_EQ(s.sample_seqs[1].penalty_count, 0);
  EXPECT_EQ(s.sample_seqs[1].mask_count, 0);
}

TEST_F(StepBuilder, GrammarMasksGetRowsOfTheirOwnAndStayPending) {
  gpu::step_batch b;
  for (uint64_t i = 0; i < 4; ++i) b.seqs.push_back(greedy(i, 10, {int32_t(100 + i)}, {int32_t(i)}, i != 2));
  auto pending = std::make_shared<gpu::token_mask>();  // filled only after the step is staged
  b.seqs[1].allowed_tokens = pending;
  b.seqs[2].allowed_tokens = std::make_shared<gpu::token_mask>();  // not sampled: no row
  b.seqs[3].allowed_tokens = std::make_shared<gpu::token_mask>();
  ASSERT_TRUE(builder_->build(b, {}, staged_).ok());
  const staged_step& s = staged_;
  ASSERT_EQ(s.grammar.size(), 2u);
  EXPECT_EQ(s.grammar[0], pending);
  EXPECT_EQ(s.grammar[1], b.seqs[3].allowed_tokens);
  EXPECT_FALSE(pending->ready());
  EXPECT_EQ(s.sample_seqs[0].grammar_row, -1);
  EXPECT_EQ(s.sample_seqs[1].grammar_row, 0);
  EXPECT_EQ(s.sample_seqs[2].grammar_row, -1);
  EXPECT_EQ(s.sample_seqs[3].grammar_row, 1);
  // A step without grammars has no rows to wait for (its sampler stays in the forward pass).
  for (auto& q : b.seqs) q.allowed_tokens.reset();
  ASSERT_TRUE(builder_->build(b, {}, staged_).ok());
  EXPECT_TRUE(staged_.grammar.empty());
  EXPECT_EQ(cuda::grammar_mask_words(1000), 32);
  EXPECT_EQ(cuda::grammar_mask_words(1024), 32);
  EXPECT_EQ(cuda::grammar_mask_words(128256), 4008);
}

TEST_F(StepBuilder, ADecodeBatchPadsToItsGraphBucket) {
  gpu::step_batch b;
  for (uint64_t i = 0; i < 3; ++i) b.seqs.push_back(greedy(i, 10, {int32_t(100 + i)}, {int32_t(i)}, i != 1));
  ASSERT_TRUE(builder_->build(b, {}, staged_).ok());
  const staged_step& s = staged_;
  EXPECT_EQ(s.bucket, 4);
  EXPECT_EQ(s.rows, 4);
  EXPECT_EQ(s.slots[3], -1);  // the padding row writes nothing to the cache
  EXPECT_EQ(s.token_seqs, (std::vector<int32_t>{0, 1, 2, -1}));  // and attends to nothing
  EXPECT_EQ(s.sample_rows, (std::vector<int32_t>{0, 1, 2, 3}));  // every row through the sampler
  EXPECT_EQ(s.sample_seqs.size(), 4u);
  EXPECT_EQ(s.out_rows, (std::vector<int32_t>{0, 2}));  // what the two sampling sequences read
  EXPECT_EQ(s.seq_ids, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(cuda::decode_bucket(1), 1);
  EXPECT_EQ(cuda::decode_bucket(9), 16);
  EXPECT_EQ(cuda::decode_bucket(17), 24);
  EXPECT_EQ(cuda::decode_bucket(257), 0);
}

TEST_F(StepBuilder, InvalidStepsAreRefusedNamingWhatIsWrong) {
  const auto refused = [&](const gpu::step_batch& b, const std::vector<std::pair<uint64_t, int32_t>>& previous = {}) {
    const status st = builder_->build(b, previous, staged_);
    EXPECT_FALSE(st.ok());
    return st.ok() ? std::string() : st.err().message;
  };
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, {1000}, {0}, true));
  EXPECT_NE(refused(b).find("outside the vocabulary"), std::string::npos);
  b.seqs[0] = greedy(1, 0, {1}, {32}, true);
  EXPECT_NE(refused(b).find("outside the pool"), std::string::npos);
  b.seqs[0] = greedy(1, 16, {1}, {0}, true);
  EXPECT_NE(refused(b).find("block table has 1 blocks for 17 tokens"), std::string::npos);
  b.seqs[0] = greedy(1, 0, {gpu::previous_token}, {0}, true);
  EXPECT_NE(refused(b, {{2, 0}}).find("no token sampled in the previous step"), std::string::npos);
  b.seqs[0] = greedy(1, 0, {}, {0}, true);
  EXPECT_NE(refused(b).find("no new tokens"), std::string::npos);
  b.seqs[0] = greedy(1, 250, std::vector<int32_t>(10, 1), std::vector<int32_t>(16, 0), false);
  EXPECT_NE(refused(b).find("--max-model-len"), std::string::npos);
  b.seqs.assign(9, greedy(1, 0, {1}, {0}, false));
  EXPECT_NE(refused(b).find("--max-num-seqs"), std::string::npos);
  b.seqs.assign(1, greedy(1, 0, std::vector<int32_t>(65, 1), std::vector<int32_t>(5, 0), false));
  EXPECT_NE(refused(b).find("--max-num-batched-tokens"), std::string::npos);
  b.seqs.assign(1, greedy(1, 0, {1}, {0}, false));
  b.block_copies = {{0, 40}};
  EXPECT_NE(refused(b).find("block copy 0 -> 40"), std::string::npos);
}

}  // namespace
}  // namespace actorserve::testing
