#include "gpu/sampling/cpu_sampler.hpp"

#include <cmath>
#include <limits>

namespace actorserve::gpu {

sampled_token sample_token(std::span<float> logits, const step_sequence& seq,
                           std::span<const int32_t> eos_token_ids) {
  (void)eos_token_ids;
  sampled_token out;
  out.seq_id = seq.seq_id;
  if (logits.empty()) return out;
  size_t best = 0;
  float max_logit = logits[0];
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      best = i;
    }
  }
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max_logit));
  out.token_id = static_cast<int32_t>(best);
  out.logprob = static_cast<float>(-std::log(sum));
  return out;
}

}  // namespace actorserve::gpu
