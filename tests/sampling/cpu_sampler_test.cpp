#include "gpu/sampling/cpu_sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "sampler_test_util.hpp"

namespace actorserve::testing {
namespace {

using gpu::sample_token;

std::vector<float> random_logits(size_t vocab, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(vocab);
  for (float& l : out) l = dist(gen);
  return out;
}

sampling_params greedy_params() {
  sampling_params p;
  p.temperature = 0.0f;
  return p;
}

TEST(CpuSampler, LogitBiasShiftsTheChoice) {
  std::vector<float> logits = random_logits(1000, 3);
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  sampling_params p = greedy_params();
  p.logit_bias = {{17, 100.0f}};
  auto copy = logits;
  EXPECT_EQ(sample_token(copy, make_seq(p, 1), {}).token_id, 17);
  p.logit_bias = {{static_cast<int32_t>(best), -100.0f}, {5000, 100.0f}};  // out of the vocab: ignored
  copy = logits;
  const auto tok = sample_token(copy, make_seq(p, 1), {});
  EXPECT_NE(tok.token_id, best);
  // Sampled draws never pick a token biased to -100 against a field of ordinary logits.
  p.temperature = 1.0f;
  for (uint32_t trial = 0; trial < 50; ++trial) {
    std::vector<float> uniform(1000, 0.0f);
    p.logit_bias = {{0, -100.0f}, {1, 100.0f}};
    EXPECT_EQ(sample_token(uniform, make_seq(p, trial), {}).token_id, 1);
  }
}

std::shared_ptr<gpu::token_mask> mask_of(std::initializer_list<int32_t> ids, size_t vocab) {
  std::vector<uint32_t> words((vocab + 31) / 32, 0);
  for (int32_t id : ids) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  auto m = std::make_shared<gpu::token_mask>();
  m->fill(std::move(words));
  return m;
}

TEST(CpuSampler, TokenMaskAllowsOnlyItsTokens) {
  const std::vector<float> logits = random_logits(1000, 9);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    sampling_params p;
    p.temperature = 1.5f;
    auto seq = make_seq(p, seed);
    seq.allowed_tokens = mask_of({3, 640, 999}, logits.size());
    auto copy = logits;
    const auto tok = sample_token(copy, seq, {});
    EXPECT_TRUE(tok.token_id == 3 || tok.token_id == 640 || tok.token_id == 999) << tok.token_id;
  }
  auto copy = logits;
  auto seq = make_seq(greedy_params(), 1);
  seq.allowed_tokens = mask_of({700}, logits.size());
  seq.params.logit_bias = {{5, 100.0f}};  // the mask comes first: a bias cannot bring a token back
  EXPECT_EQ(sample_token(copy, seq, {}).token_id, 700);
}

TEST(CpuSampler, TokenMaskFilledLaterIsWaitedForAndAnAbandonedOneConstrainsNothing) {
  const std::vector<float> logits = random_logits(300, 4);
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  auto late = std::make_shared<gpu::token_mask>();
  auto seq = make_seq(greedy_params(), 1);
  seq.allowed_tokens = late;
  std::thread filler([late, n = logits.size()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<uint32_t> words((n + 31) / 32, 0);
    words[0] = 1u << 7;
    late->fill(std::move(words));
  });
  auto copy = logits;
  EXPECT_EQ(sample_token(copy, seq, {}).token_id, 7);
  filler.join();
  auto dropped = std::make_shared<gpu::token_mask>();
  dropped->abandon();
  seq.allowed_tokens = dropped;
  copy = logits;
  EXPECT_EQ(sample_token(copy, seq, {}).token_id, best);
}

TEST(CpuSampler, GreedyPicksTheArgmax) {
  for (uint32_t trial = 0; trial < 20; ++trial) {
    std::vector<float> logits = random_logits(1000, trial);
    const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    auto tok = sample_token(logits, make_seq(greedy_params(), trial), {});
    EXPECT_EQ(tok.token_id, expected);
    EXPECT_EQ(tok.seq_id, 7u);
  }
}

TEST(CpuSampler, GreedyTiesGoToTheLowestId) {
  std::vector<float> logits = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  EXPECT_EQ(sample_token(logits, make_seq(greedy_params()), {}).token_id, 1);
}

TEST(CpuSampler, SameSeedAndCounterGiveTheSameToken) {
  const std::vector<float> logits = random_logits(500, 3, 1.0f);
  sampling_params p;
  for (int32_t step = 0; step < 50; ++step) {
    std::vector<float> a = logits, b = logits;
    EXPECT_EQ(sample_token(a, make_seq(p, 99, step), {}).token_id,
              sample_token(b, make_seq(p, 99, step), {}).token_id);
  }
}

TEST(CpuSampler, DifferentSeedsDifferOverManyDraws) {
  const std::vector<float> logits(200, 0.0f);  // uniform: any two streams agree 1/200 of the time
  sampling_params p;
  int same = 0;
  for (int32_t step = 0; step < 500; ++step) {
    std::vector<float> a = logits, b = logits;
    same += sample_token(a, make_seq(p, 1, step), {}).token_id ==
            sample_token(b, make_seq(p, 2, step), {}).token_id;
  }
  EXPECT_LT(same, 15);
}

TEST(CpuSampler, SuccessiveDrawsOfOneSeedVary) {
  const std::vector<float> logits(200, 0.0f);
  std::set<int32_t> seen;
  for (int32_t step = 0; step < 100; ++step) {
    std::vector<float> a = logits;
    seen.insert(sample_token(a, make_seq(sampling_params{}, 5, step), {}).token_id);
  }
  EXPECT_GT(seen.size(), 50u);
}

TEST(CpuSampler, TopKOneEqualsGreedy) {
  sampling_params p;
  p.top_k = 1;
  for (uint32_t trial = 0; trial < 50; ++trial) {
    std::vector<float> a = random_logits(300, trial, 0.5f), b = a;
    EXPECT_EQ(sample_token(a, make_seq(p, trial, 0), {}).token_id,
              sample_token(b, make_seq(greedy_params()), {}).token_id);
  }
}

TEST(CpuSampler, SmallTopPKeepsOnlyTheTopToken) {
  sampling_params p;
  p.top_p = 0.01f;
  const std::vector<float> logits = random_logits(300, 11, 0.5f);
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  const std::vector<int> counts = draw_counts(logits, p, 500);
  EXPECT_EQ(counts[static_cast<size_t>(best)], 500);
}

TEST(CpuSampler, SuppressEosNeverReturnsEosOrStopIds) {
  sampling_params p;
  p.stop_token_ids = {3};
  std::vector<float> logits = {0.0f, 9.0f, 0.5f, 9.0f, 0.1f};  // EOS (1) and stop id 3 dominate
  const int32_t eos[] = {1};
  for (int32_t step = 0; step < 2000; ++step) {
    std::vector<float> scratch = logits;
    auto seq = make_seq(p, 42, step);
    seq.suppress_eos = true;
    const int32_t tok = sample_token(scratch, seq, eos).token_id;
    ASSERT_NE(tok, 1);
    ASSERT_NE(tok, 3);
  }
  std::vector<float> scratch = logits;
  p.temperature = 0.0f;
  auto seq = make_seq(p);
  seq.suppress_eos = true;
  EXPECT_EQ(sample_token(scratch, seq, eos).token_id, 2);
  scratch = logits;
  seq.suppress_eos = false;
  EXPECT_EQ(sample_token(scratch, seq, eos).token_id, 1);
}

TEST(CpuSampler, LogprobsEqualADirectLogSoftmax) {
  const std::vector<float> logits = random_logits(50, 21);
  const std::vector<double> expected = log_softmax(logits);
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  sampling_params p;
  p.temperature = 0.7f;  // logprobs are reported before temperature
  p.num_logprobs = 5;
  for (int32_t step = 0; step < 40; ++step) {
    std::vector<float> scratch = logits;
    const auto tok = sample_token(scratch, make_seq(p, 8, step), {});
    EXPECT_NEAR(tok.logprob, expected[static_cast<size_t>(tok.token_id)], 1e-5);
    ASSERT_EQ(tok.top_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(tok.top_logprobs[i].token_id, order[i]);
      EXPECT_NEAR(tok.top_logprobs[i].logprob, expected[static_cast<size_t>(order[i])], 1e-5);
    }
    const bool among_best = std::find(order.begin(), order.begin() + 5, tok.token_id) !=
                            order.begin() + 5;
    const bool listed = std::any_of(tok.top_logprobs.begin(), tok.top_logprobs.end(),
                                    [&](const gpu::token_logprob& t) {
                                      return t.token_id == tok.token_id && t.logprob == tok.logprob;
                                    });
    EXPECT_EQ(among_best, listed);
  }
}

TEST(CpuSampler, NoTopLogprobsUnlessAsked) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  sampling_params p = greedy_params();
  p.num_logprobs = 0;
  const auto tok = sample_token(logits, make_seq(p), {});
  EXPECT_TRUE(tok.top_logprobs.empty());
  EXPECT_NEAR(tok.logprob, log_softmax({1.0f, 2.0f, 3.0f})[2], 1e-6);
}

TEST(CpuSampler, TopLogprobsAreClampedToTheVocab) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  sampling_params p = greedy_params();
  p.num_logprobs = 20;
  EXPECT_EQ(sample_token(logits, make_seq(p), {}).top_logprobs.size(), 3u);
}

TEST(CpuSampler, EverythingMaskedStillReturnsAToken) {
  std::vector<float> logits = {0.0f, 1.0f};
  auto seq = make_seq(sampling_params{}, 1, 0);
  seq.params.stop_token_ids = {0};
  seq.suppress_eos = true;
  const int32_t eos[] = {1};
  const auto tok = sample_token(logits, seq, eos);
  EXPECT_GE(tok.token_id, 0);
  EXPECT_LT(tok.token_id, 2);
}

TEST(CpuSampler, NanLogitsAreNeverSampled) {
  const std::vector<float> logits = {NAN, 1.0f, NAN, 0.5f};
  sampling_params p;
  p.num_logprobs = 2;
  for (int32_t step = 0; step < 200; ++step) {
    std::vector<float> scratch = logits;
    const auto tok = sample_token(scratch, make_seq(p, 4, step), {});
    ASSERT_TRUE(tok.token_id == 1 || tok.token_id == 3) << tok.token_id;
    ASSERT_TRUE(std::isfinite(tok.logprob));
    ASSERT_EQ(tok.top_logprobs[0].token_id, 1);
    ASSERT_EQ(tok.top_logprobs[1].token_id, 3);
  }
  std::vector<float> scratch = logits;
  EXPECT_EQ(sample_token(scratch, make_seq(greedy_params()), {}).token_id, 1);
}

}  // namespace
}  // namespace actorserve::testing
