#pragma once
// Waves of chat requests behind system prompts, for the cascade-attention engine tests (CPU and
// CUDA executors): each wave caches its system prompt with a one-token request, then submits its
// requests together and waits for them.
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine_harness.hpp"

namespace actorserve::actors::testing {

using wave_results = std::map<int, std::map<int32_t, choice_result>>;

/// Runs `prompts` as one wave (all submitted together, keys first_key + i) and waits for them.
inline wave_results run_wave(engine& e, const std::vector<std::vector<int32_t>>& prompts, const sampling_params& p,
                             int first_key = 0) {
  collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int key = first_key + static_cast<int>(i);
    auto st = e.submit(make_request("r" + std::to_string(key), prompts[i], p), c.sink(key));
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.err().message);
  }
  EXPECT_TRUE(c.wait(std::chrono::seconds(120)));
  return c.results();
}

/// `n` prompts: `system` followed by a user turn of 5-30 tokens each.
inline std::vector<std::vector<int32_t>> chat_prompts(std::mt19937& rng, const std::vector<int32_t>& system, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    auto p = system;
    const auto turn = random_prompt(rng, 5, 30);
    p.insert(p.end(), turn.begin(), turn.end());
    out.push_back(std::move(p));
  }
  return out;
}

/// A system prompt and the requests behind it.
struct prompt_wave {
  std::vector<int32_t> system;
  std::vector<std::vector<int32_t>> prompts;
};

/// The waves in turn: the system prompt alone (one greedy token, which caches its blocks), then
/// the wave's requests with `p` (keys 100 x wave + i). `warmup_computed`, when given, gets the
/// tokens each warm-up computed (a prompt evicted from the prefix cache is computed again).
inline wave_results run_waves(engine& e, const std::vector<prompt_wave>& waves, const sampling_params& p,
                              std::vector<int64_t>* warmup_computed = nullptr) {
  wave_results all;
  for (size_t w = 0; w < waves.size(); ++w) {
    const int64_t before = wait_idle(e).num_computed_tokens;
    run_wave(e, {waves[w].system}, greedy(1), 1000 + static_cast<int>(w));
    if (warmup_computed) warmup_computed->push_back(wait_idle(e).num_computed_tokens - before);
    for (auto& [k, v] : run_wave(e, waves[w].prompts, p, 100 * static_cast<int>(w))) all[k] = std::move(v);
  }
  return all;
}

}  // namespace actorserve::actors::testing
