// Grammar masks in the CUDA executor: a mask forces the sampled token into its ids (prefill,
// eager decode and decode graphs; greedy and random draws) and agrees with the CPU sampler on the
// same logits; rows without a mask are untouched; a mask filled after its step was submitted (as
// the scheduler fills a step planned ahead, from the previous step's result) and an abandoned
// mask both let the step complete.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/sampling/cpu_sampler.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr int kVocab = 1024;  // llama-tiny

std::vector<uint32_t> words_of(const std::vector<int32_t>& ids, int vocab = kVocab) {
  std::vector<uint32_t> words(size_t(vocab + 31) / 32, 0u);
  for (int32_t id : ids) words[size_t(id) >> 5] |= 1u << (id & 31);
  return words;
}

std::shared_ptr<gpu::token_mask> filled(const std::vector<int32_t>& ids) {
  auto m = std::make_shared<gpu::token_mask>();
  m->fill(words_of(ids));
  return m;
}

bool allows(const gpu::step_sequence& s, int32_t token) {
  const std::vector<uint32_t>* w = s.allowed_tokens->wait();
  if (!w) return true;
  return size_t(token) >> 5 < w->size() && (((*w)[size_t(token) >> 5] >> (token & 31)) & 1u);
}

std::vector<int32_t> blocks_of(int s) { return {s * 8, s * 8 + 1, s * 8 + 2, s * 8 + 3}; }

/// The CPU sampler on the logits the executor kept for sampled row `row` of its last step.
int32_t cpu_token(gpu::executor& ex, size_t row, const gpu::step_sequence& s) {
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::vector<float> logits = probe->last_logits().at(row);
  return gpu::sample_token(logits, s, ex.info().eos_token_ids).token_id;
}

class CudaGrammarMask : public ::testing::TestWithParam<bool> {  // eager?
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    auto made = gpu::make_cuda_executor(model_dir("llama-tiny"), test_options(GetParam()));
    ASSERT_TRUE(made.ok()) << made.err().message;
    ex_ = std::move(made.value());
    ASSERT_EQ(ex_->info().vocab_size, kVocab);
    EXPECT_TRUE(ex_->supports_token_masks());
  }
  std::unique_ptr<gpu::executor> ex_;
};

TEST_P(CudaGrammarMask, ForcesTokensIntoTheMaskAndAgreesWithTheCpuSampler) {
  // Four sequences: 0 and 2 without a grammar, 1 greedy and 3 random under one; a prefill, then
  // six decode steps (graph bucket 4 unless eager), each with new masks, then two without any
  // (the same bucket's graph with the sampler inside).
  const int n = 4;
  std::vector<int> lens;
  gpu::step_batch b;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> prompt(size_t(5 + 7 * s));
    std::iota(prompt.begin(), prompt.end(), 40 + s);
    b.seqs.push_back(greedy(uint64_t(s), 0, prompt, blocks_of(s)));
    lens.push_back(int(prompt.size()));
  }
  b.seqs[3].params.temperature = 1.0f;
  b.seqs[3].seed = 77;
  std::vector<std::vector<int32_t>> out(n);
  int random_differ = 0;
  for (int k = 0; k <= 8; ++k) {
    if (k > 0) {
      for (int s = 0; s < n; ++s) {
        b.seqs[s].num_computed = lens[s] + k - 1;
        b.seqs[s].new_tokens = {out[s].back()};
        b.seqs[s].num_generated = k;
      }
    }
    // A few ids far from each other, different per step; seq 3 allows a wider set.
    b.seqs[1].allowed_tokens = filled({int32_t(100 + 37 * k), int32_t(500 + k), int32_t(1000 - k)});
    std::vector<int32_t> wide;
    for (int id = k; id < kVocab; id += 9) wide.push_back(id);
    b.seqs[3].allowed_tokens = filled(wide);
    if (k > 6) {
      b.seqs[1].allowed_tokens.reset();
      b.seqs[3].allowed_tokens.reset();
    }
    auto r = run_step(*ex_, b);
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    ASSERT_EQ(r.tokens.size(), size_t(n));
    for (int s = 0; s < n; ++s) {
      const int32_t got = r.tokens[size_t(s)].token_id;
      if (b.seqs[s].allowed_tokens) {
        EXPECT_TRUE(allows(b.seqs[s], got)) << "step " << k << " seq " << s << " sampled " << got;
      }
      const int32_t want = cpu_token(*ex_, size_t(s), b.seqs[s]);
      if (b.seqs[s].params.greedy()) {
        EXPECT_EQ(got, want) << "step " << k << " seq " << s;
      } else {
        random_differ += got != want;  // a draw within rounding of a boundary may differ
      }
      out[s].push_back(got);
    }
  }
  EXPECT_LE(random_differ, 1);
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(ex_.get());
  if (!GetParam()) {
    EXPECT_GE(probe->graph_replays(), 8);
  }
}

TEST_P(CudaGrammarMask, RandomDrawsStayInTheMask) {
  const int n = 16;
  const std::vector<int32_t> allowed = {3, 4, 5, 6, 700};
  gpu::step_batch b;
  for (int s = 0; s < n; ++s) {
    b.seqs.push_back(greedy(uint64_t(s), 0, {1, 2, int32_t(10 + s)}, blocks_of(s)));
    b.seqs.back().params.temperature = 1.5f;
    b.seqs.back().seed = uint64_t(1000 + s);
    b.seqs.back().allowed_tokens = filled(allowed);
  }
  auto r = run_step(*ex_, b);
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  int matched = 0;
  for (int s = 0; s < n; ++s) {
    const int32_t got = r.tokens[size_t(s)].token_id;
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), got), allowed.end()) << "seq " << s << " sampled " << got;
    matched += got == cpu_token(*ex_, size_t(s), b.seqs[s]);
  }
  EXPECT_GE(matched, n - 1);  // a draw within rounding of a boundary may differ
}

TEST_P(CudaGrammarMask, AMaskFilledLateHoldsOnlyTheSampling) {
  // As the scheduler plans ahead: step N decodes and samples; step N+1, submitted right after it,
  // decodes N's token (gpu::previous_token) and samples under a mask filled from N's token when
  // N's result arrives (after a delay, so the mask is late for N+1's forward pass).
  gpu::step_batch pre;
  pre.seqs.push_back(greedy(1, 0, {11, 12, 13, 14, 15}, blocks_of(1)));
  auto r0 = run_step(*ex_, pre);
  ASSERT_TRUE(r0.outcome.ok()) << r0.outcome.err().message;
  for (int round = 0; round < 3; ++round) {
    const int32_t before = 5 + 2 * round;
    gpu::step_batch n0;
    n0.step_id = 10 + 2 * uint64_t(round);
    n0.seqs.push_back(greedy(1, before, {round == 0 ? r0.tokens.at(0).token_id : 17}, blocks_of(1)));
    n0.seqs.back().num_generated = 1 + 2 * round;
    gpu::step_batch n1;
    n1.step_id = n0.step_id + 1;
    n1.seqs.push_back(greedy(1, before + 1, {gpu::previous_token}, blocks_of(1)));
    n1.seqs.back().num_generated = 2 + 2 * round;
    auto mask = std::make_shared<gpu::token_mask>();
    n1.seqs.back().allowed_tokens = mask;
    std::promise<gpu::step_result> p0, p1;
    std::thread filler;
    std::promise<int32_t> first_token;
    ex_->submit(n0, [&](gpu::step_result r) {
      const int32_t t = r.outcome.ok() && !r.tokens.empty() ? r.tokens[0].token_id : 0;
      first_token.set_value(t);
      filler = std::thread([mask, t, round] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50 * round));
        mask->fill(words_of({(t + 1) % kVocab, (t + 333) % kVocab}));
      });
      p0.set_value(std::move(r));
    });
    ex_->submit(n1, [&](gpu::step_result r) { p1.set_value(std::move(r)); });
    auto f1 = p1.get_future();
    ASSERT_EQ(f1.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the step never completed";
    auto r1 = f1.get();
    auto res0 = p0.get_future().get();
    filler.join();
    ASSERT_TRUE(res0.outcome.ok()) << res0.outcome.err().message;
    ASSERT_TRUE(r1.outcome.ok()) << r1.outcome.err().message;
    const int32_t t = first_token.get_future().get();
    const int32_t got = r1.tokens.at(0).token_id;
    EXPECT_TRUE(got == (t + 1) % kVocab || got == (t + 333) % kVocab) << "round " << round << " sampled " << got;
    EXPECT_EQ(got, cpu_token(*ex_, 0, n1.seqs[0])) << "round " << round;
  }
}

TEST_P(CudaGrammarMask, AnAbandonedMaskLetsTheStepComplete) {
  // The sequence ended on the previous step's result: its mask is abandoned and the sampling goes
  // on unconstrained (its token is dropped by the engine).
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, {21, 22, 23}, blocks_of(1)));
  b.seqs.push_back(greedy(2, 0, {31, 32, 33, 34}, blocks_of(2)));
  b.seqs[1].allowed_tokens = filled({9});
  auto r = run_step(*ex_, b);
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  gpu::step_batch d;
  d.seqs.push_back(greedy(1, 3, {r.tokens.at(0).token_id}, blocks_of(1)));
  d.seqs.push_back(greedy(2, 4, {9}, blocks_of(2)));
  auto abandoned = std::make_shared<gpu::token_mask>();
  d.seqs[0].allowed_tokens = abandoned;
  d.seqs[1].allowed_tokens = filled({42});
  std::thread ender([abandoned] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abandoned->abandon();
  });
  std::promise<gpu::step_result> done;
  ex_->submit(d, [&](gpu::step_result res) { done.set_value(std::move(res)); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the step hung on its mask";
  ender.join();
  auto rd = f.get();
  ASSERT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
  d.seqs[0].allowed_tokens.reset();  // unconstrained: the greedy token of its logits
  EXPECT_EQ(rd.tokens.at(0).token_id, cpu_token(*ex_, 0, d.seqs[0]));
  EXPECT_EQ(rd.tokens.at(1).token_id, 42);
  // The executor goes on.
  gpu::step_batch next;
  next.seqs.push_back(greedy(2, 5, {42}, blocks_of(2)));
  auto rn = run_step(*ex_, next);
  EXPECT_TRUE(rn.outcome.ok()) << rn.outcome.err().message;
}

TEST_P(CudaGrammarMask, AMaskShorterThanTheVocabularyAllowsNothingPastIt) {
  // A grammar over a tokenizer smaller than the model's (padded) vocabulary: ids past its words
  // are never sampled, as on the CPU.
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, {5, 6, 7}, blocks_of(1)));
  b.seqs[0].allowed_tokens = std::make_shared<gpu::token_mask>();
  b.seqs[0].allowed_tokens->fill(std::vector<uint32_t>(1, ~0u));  // ids 0..31
  auto r = run_step(*ex_, b);
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  EXPECT_LT(r.tokens.at(0).token_id, 32);
  EXPECT_EQ(r.tokens.at(0).token_id, cpu_token(*ex_, 0, b.seqs[0]));
}

INSTANTIATE_TEST_SUITE_P(EagerAndGraphs, CudaGrammarMask, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "eager" : "graphs");
                         });

}  // namespace
}  // namespace actorserve::testing
