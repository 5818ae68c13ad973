#include <gtest/gtest.h>

#include "gpu/sampling/cpu_sampler.hpp"
#include "gpu/sampling/logits_ops.hpp"
#include "sampler_test_util.hpp"

namespace actorserve::testing {
namespace {

// Prompt [0, 1, 9(out of vocab)], output [2, 2, 3]; token 4 is never seen.
const std::vector<float> base = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
const std::vector<int32_t> prompt = {0, 1, 9};
const std::vector<int32_t> output = {2, 2, 3};

std::vector<float> penalised(const sampling_params& p) {
  std::vector<float> logits = base;
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), output.begin(), output.end());
  gpu::apply_penalties(logits, p, history, static_cast<int32_t>(prompt.size()));
  return logits;
}

void expect_logits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "token " << i;
}

TEST(SamplerPenalties, RepetitionDividesPositiveAndMultipliesNegativeOverPromptAndOutput) {
  sampling_params p;
  p.repetition_penalty = 2.0f;
  expect_logits(penalised(p), {1.0f, -2.0f, 0.25f, 1.5f, 0.0f});
}

TEST(SamplerPenalties, PresenceSubtractsOnceForEachOutputToken) {
  sampling_params p;
  p.presence_penalty = 0.5f;
  expect_logits(penalised(p), {2.0f, -1.0f, 0.0f, 2.5f, 0.0f});
}

TEST(SamplerPenalties, FrequencySubtractsPerOutputOccurrence) {
  sampling_params p;
  p.frequency_penalty = 0.25f;
  expect_logits(penalised(p), {2.0f, -1.0f, 0.0f, 2.75f, 0.0f});
}

TEST(SamplerPenalties, AllThreeApplyRepetitionFirst) {
  sampling_params p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  expect_logits(penalised(p), {1.0f, -2.0f, -0.75f, 0.75f, 0.0f});
}

TEST(SamplerPenalties, NegativePenaltiesRaiseOutputTokens) {
  sampling_params p;
  p.presence_penalty = -1.0f;
  p.frequency_penalty = -0.5f;
  expect_logits(penalised(p), {2.0f, -1.0f, 2.5f, 4.5f, 0.0f});
}

TEST(SamplerPenalties, SampleTokenReportsLogprobsAfterPenalties) {
  sampling_params p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.num_logprobs = 5;
  auto seq = make_seq(p);
  set_history(seq, prompt, output);
  std::vector<float> logits = base;
  const auto tok = gpu::sample_token(logits, seq, {});
  const std::vector<double> want = log_softmax({1.0f, -2.0f, -0.75f, 0.75f, 0.0f});
  EXPECT_EQ(tok.token_id, 0);  // was 3 before penalties
  EXPECT_NEAR(tok.logprob, want[0], 1e-6);
  ASSERT_EQ(tok.top_logprobs.size(), 5u);
  const int32_t order[] = {0, 3, 4, 2, 1};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(tok.top_logprobs[i].token_id, order[i]);
    EXPECT_NEAR(tok.top_logprobs[i].logprob, want[static_cast<size_t>(order[i])], 1e-6);
  }
}

TEST(SamplerPenalties, PresencePenaltyFlipsAGreedyChoice) {
  sampling_params p;
  p.temperature = 0.0f;
  p.presence_penalty = 0.5f;
  auto seq = make_seq(p);
  set_history(seq, {1}, {0});
  std::vector<float> logits = {3.0f, 2.9f};
  EXPECT_EQ(gpu::sample_token(logits, seq, {}).token_id, 1);
  set_history(seq, {0}, {});  // only the prompt holds 0: presence does not apply
  logits = {3.0f, 2.9f};
  EXPECT_EQ(gpu::sample_token(logits, seq, {}).token_id, 0);
}

TEST(SamplerPenalties, NoPenaltiesLeaveLogitsUntouched) {
  expect_logits(penalised(sampling_params{}), base);
}

}  // namespace
}  // namespace actorserve::testing
