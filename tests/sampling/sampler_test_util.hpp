#pragma once
/// Helpers shared by the sampler tests: a sequence builder and a direct log-softmax.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/executor.hpp"
#include "gpu/sampling/cpu_sampler.hpp"

namespace actorserve::testing {

/// A sequence that asks to sample with `params`, `seed` and draw number `num_generated`.
inline gpu::step_sequence make_seq(const sampling_params& params, uint64_t seed = 0,
                                   int32_t num_generated = 0) {
  gpu::step_sequence seq;
  seq.seq_id = 7;
  seq.sample = true;
  seq.params = params;
  seq.seed = seed;
  seq.num_generated = num_generated;
  return seq;
}

/// Attaches prompt + output history to `seq`.
inline void set_history(gpu::step_sequence& seq, std::vector<int32_t> prompt,
                        const std::vector<int32_t>& output) {
  seq.prompt_len = static_cast<int32_t>(prompt.size());
  prompt.insert(prompt.end(), output.begin(), output.end());
  seq.history = std::make_shared<const std::vector<int32_t>>(std::move(prompt));
}

/// log-softmax of `logits` computed directly in double (written independently of the sampler).
inline std::vector<double> log_softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_value = -INFINITY;
  for (float l : logits) max_value = std::max(max_value, l / temperature);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l / temperature - max_value);
  std::vector<double> out;
  for (float l : logits) out.push_back(l / temperature - max_value - std::log(sum));
  return out;
}

/// softmax of `logits` at `temperature`.
inline std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  std::vector<double> out = log_softmax(logits, temperature);
  for (double& v : out) v = std::exp(v);
  return out;
}

/// Counts of `draws` samples of `logits` (draw i uses num_generated = i) per token id.
inline std::vector<int> draw_counts(const std::vector<float>& logits, const sampling_params& params,
                                    int draws, uint64_t seed = 1234) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> scratch = logits;
    const auto tok = gpu::sample_token(scratch, make_seq(params, seed, i), {});
    ++counts.at(static_cast<size_t>(tok.token_id));
  }
  return counts;
}

}  // namespace actorserve::testing
