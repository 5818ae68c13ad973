#pragma once
// Driving executors from the CUDA executor tests: synchronous steps, greedy sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <numeric>
#include <string>
#include <utility>
#include <vector>
#include <thread>

#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/executor.hpp"

namespace actorserve::testing {

/// The fixtures with a reference.json that the CUDA executor runs, dense and MoE, fp32 and bf16;
/// mistral-sliding-window's 48-key window is shorter than the prompts and the context.
inline const std::vector<std::string>& executor_fixtures() {
  static const std::vector<std::string> models = {"llama-tiny",       "llama-hd128-bf16", "qwen2-tiny",
                                                  "mistral-tiny",     "qwen3-tiny",       "qwen3-hd128-bf16",
                                                  "mixtral-tiny",     "mixtral-bf16",     "qwen3-moe-tiny",
                                                  "qwen3-moe-bf16",   "deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16",
                                                  "deepseek-v2-yarn-tiny", "mistral-sliding-window"};
  return models;
}

/// A fixture name as a test-name suffix ('-' is not allowed there): for INSTANTIATE_TEST_SUITE_P.
inline std::string model_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

/// Submits one step and waits for it; checks `done` runs on another thread.
inline gpu::step_result run_step(gpu::executor& ex, gpu::step_batch b) {
  std::promise<gpu::step_result> pr;
  auto fut = pr.get_future();
  const auto caller = std::this_thread::get_id();
  ex.submit(std::move(b), [&pr, caller](gpu::step_result r) {
    EXPECT_NE(std::this_thread::get_id(), caller) << "done must run on the executor's thread";
    pr.set_value(std::move(r));
  });
  return fut.get();
}

inline gpu::step_sequence greedy(uint64_t id, int32_t num_computed, std::vector<int32_t> tokens,
                                 std::vector<int32_t> blocks, bool sample = true) {
  gpu::step_sequence s;
  s.seq_id = id;
  s.num_computed = num_computed;
  s.new_tokens = std::move(tokens);
  s.block_table = std::move(blocks);
  s.sample = sample;
  s.params.temperature = 0.0f;
  return s;
}

/// One sequence through a 29-token prefill and `steps` one-token steps, fed `forced` tokens when
/// given (else its own greedy tokens); the tokens sampled and the logits of every decode step.
inline std::pair<std::vector<int32_t>, std::vector<std::vector<float>>> one_sequence(
    gpu::executor& ex, int steps, const std::vector<int32_t>& forced) {
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::vector<int32_t> prompt(29);
  std::iota(prompt.begin(), prompt.end(), 11);
  const std::vector<int32_t> blocks = {3, 9, 4, 17, 5, 6};
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, prompt, blocks));
  auto r = run_step(ex, b);
  EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  tokens.push_back(r.tokens.at(0).token_id);
  for (int k = 0; k < steps; ++k) {
    const int32_t next = forced.empty() ? tokens.back() : forced[size_t(k)];
    gpu::step_batch d;
    d.seqs.push_back(greedy(1, int32_t(prompt.size()) + k, {next}, blocks));
    auto rd = run_step(ex, d);
    EXPECT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
    tokens.push_back(rd.tokens.at(0).token_id);
    logits.push_back(probe->last_logits().at(0));
  }
  return {tokens, logits};
}

/// The test's CUDA executor options: a small fixed pool, logits kept.
inline gpu::cuda_executor_options test_options(bool eager = false) {
  gpu::cuda_executor_options o;
  o.keep_logits = true;
  o.num_blocks_override = 512;
  o.max_num_batched_tokens = 1024;
  o.max_num_seqs = 32;
  o.max_model_len = 2048;
  o.enforce_eager = eager;
  return o;
}

/// Logits of a 16-bit executor against an fp32 reference (max abs err / max abs ref): every row
/// of a dense model within logits_bound. A mixture-of-experts row may route a token differently
/// where two experts' (or two groups') router scores nearly tie, and its logits then differ by
/// more than rounding: such a model may have rerouted_rows_allowed(rows) rows beyond
/// logits_bound, each within rerouted_logits_bound.
inline constexpr double logits_bound = 2e-2, rerouted_logits_bound = 0.5;

/// One row in 20 of a mixture-of-experts model's compared rows, and at least one (a test that
/// compares fewer than 20 rows would otherwise allow none).
inline int rerouted_rows_allowed(int rows) { return std::max(1, rows / 20); }

/// Top-1 minus top-2 of a logits row.
inline double top2_margin(const std::vector<float>& l) {
  float a = -1e30f, b = -1e30f;
  for (float x : l) {
    if (x > a) { b = a; a = x; } else if (x > b) { b = x; }
  }
  return double(a) - b;
}

}  // namespace actorserve::testing
