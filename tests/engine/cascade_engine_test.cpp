// Cascade attention through the real engine (actors + CPU executor): requests behind a cached
// system prompt, n > 1 samples sharing their prompt blocks, and a pool far too small, where
// preemption and prefix eviction reshuffle the block tables, give the same tokens and logprobs
// with cascade on as with --disable-cascade-attn, and the cascade pass does run.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_harness.hpp"
#include "prompt_waves.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;

/// Logprobs of the two paths differ by fp32 summation order only.
constexpr float logprob_tolerance = 1e-4f;

engine_config with_cascade(engine_config cfg, bool on) {
  cfg.executor.cascade_attention = on;
  return cfg;
}

/// Greedy with the sampled token's logprob.
sampling_params greedy_logprobs(int32_t max_tokens) {
  sampling_params p = greedy(max_tokens);
  p.num_logprobs = 0;
  return p;
}

void expect_same(const std::map<int, std::map<int32_t, choice_result>>& got,
                 const std::map<int, std::map<int32_t, choice_result>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, choices] : want) {
    ASSERT_EQ(got.at(key).size(), choices.size()) << "request " << key;
    for (const auto& [index, w] : choices) {
      const choice_result& g = got.at(key).at(index);
      EXPECT_EQ(g.tokens, w.tokens) << "request " << key << " choice " << index;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
      for (size_t t = 0; t < w.logprobs.size(); ++t)
        EXPECT_NEAR(g.logprobs[t].logprob, w.logprobs[t].logprob, logprob_tolerance)
            << "request " << key << " choice " << index << " token " << t;
    }
  }
}

class cascade_engine_test : public ::testing::TestWithParam<std::string> {};

TEST_P(cascade_engine_test, requests_behind_a_cached_system_prompt_keep_their_outputs) {
  std::mt19937 rng(31);
  const auto system = random_prompt(rng, 300, 300);
  const auto prompts = chat_prompts(rng, system, 24);
  std::map<bool, std::map<int, std::map<int32_t, choice_result>>> out;
  std::map<bool, engine_stats> stats;
  for (bool on : {false, true}) {
    auto e = start_engine(with_cascade(tiny_config(std::nullopt, true, GetParam()), on));
    ASSERT_TRUE(e);
    run_wave(*e, {system}, greedy(1), 1000);   // caches the system prompt's 18 full blocks
    out[on] = run_wave(*e, prompts, greedy_logprobs(12));
    stats[on] = wait_idle(*e);
    EXPECT_GE(stats[on].prefix_cache_hits, 24 * 288);
  }
  expect_same(out[true], out[false]);
  EXPECT_EQ(stats[false].cascade_seqs, 0);
  EXPECT_GT(stats[true].cascade_seqs, 0) << "the decodes behind the shared blocks took the cascade pass";
  std::printf("[ figures  ] %s: %lld sequence-steps through the cascade pass\n", GetParam().c_str(),
              static_cast<long long>(stats[true].cascade_seqs));
}

TEST_P(cascade_engine_test, parallel_samples_sharing_their_prompt_keep_their_outputs) {
  std::mt19937 rng(41);
  const auto prompt = random_prompt(rng, 290, 290);   // 18 full blocks shared by the samples
  sampling_params p;
  p.n = 6;
  p.temperature = 1.0f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.seed = 99;
  p.num_logprobs = 0;
  std::map<bool, std::map<int, std::map<int32_t, choice_result>>> out;
  std::map<bool, engine_stats> stats;
  for (bool on : {false, true}) {
    auto e = start_engine(with_cascade(tiny_config(std::nullopt, true, GetParam()), on));
    ASSERT_TRUE(e);
    out[on] = run_wave(*e, {prompt, prompt}, p);
    stats[on] = wait_idle(*e);
  }
  expect_same(out[true], out[false]);
  EXPECT_EQ(stats[false].cascade_seqs, 0);
  EXPECT_GT(stats[true].cascade_seqs, 0);
}

TEST_P(cascade_engine_test, preemption_and_prefix_eviction_in_a_tiny_pool_keep_the_outputs) {
  // Three waves over two system prompts, A, B, then A again, each 16 requests behind a warm-up
  // that caches its prompt. 40 blocks hold neither a wave (about 82 blocks) nor both prompts'
  // cached blocks: requests are preempted, and B's wave evicts A's prefix, which A's second wave
  // computes again.
  std::mt19937 rng(53);
  const auto a = random_prompt(rng, 300, 300), b = random_prompt(rng, 300, 300);
  const std::vector<prompt_wave> waves{
      {a, chat_prompts(rng, a, 16)}, {b, chat_prompts(rng, b, 16)}, {a, chat_prompts(rng, a, 16)}};
  auto ample = start_engine(with_cascade(tiny_config(4096, true, GetParam()), false));
  ASSERT_TRUE(ample);
  const auto want = run_waves(*ample, waves, greedy_logprobs(24));
  ample->shutdown(std::chrono::milliseconds(0));

  auto tight = start_engine(with_cascade(tiny_config(40, true, GetParam()), true));
  ASSERT_TRUE(tight);
  std::vector<int64_t> warmups;
  const auto got = run_waves(*tight, waves, greedy_logprobs(24), &warmups);
  const int64_t recomputed = warmups.at(2);
  expect_same(got, want);
  const auto s = wait_idle(*tight);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GE(recomputed, 288) << "B's wave evicted A's cached blocks";
  EXPECT_GT(s.cascade_seqs, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total) << "blocks leaked";
  std::printf("[ figures  ] %s: 40 blocks: %lld preemptions, %lld sequence-steps through the cascade pass\n",
              GetParam().c_str(), static_cast<long long>(s.num_preemptions), static_cast<long long>(s.cascade_seqs));
}

INSTANTIATE_TEST_SUITE_P(models, cascade_engine_test, ::testing::Values("llama-tiny", "qwen2-tiny", "mistral-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace actorserve::actors
