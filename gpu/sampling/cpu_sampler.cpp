#include "gpu/sampling/cpu_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gpu/sampling/counter_rng.hpp"
#include "gpu/sampling/logits_ops.hpp"

namespace actorserve::gpu {
namespace {

/// Below this temperature sampling is greedy (as vLLM's _SAMPLING_EPS): exp() would overflow.
constexpr float min_temperature = 1e-5f;
/// First candidate count tried when top-p must find its nucleus without top-k.
constexpr size_t first_nucleus_guess = 256;

bool top_k_active(const sampling_params& p, size_t vocab) {
  return p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;
}

/// Keeps the prefix of `ids` (sorted by probability, best first) whose mass before each id is
/// below `top_p * mass`; false when the whole list was kept without reaching it.
bool cut_nucleus(std::vector<int32_t>& ids, std::span<const float> probs, double top_p,
                 double mass) {
  double cum = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && cum >= top_p * mass) {
      ids.resize(i);
      return true;
    }
    cum += probs[static_cast<size_t>(ids[i])];
  }
  return cum >= top_p * mass;
}

/// Draws one id of `ids` with weights probs[id], using uniform `u` in [0, 1).
int32_t draw(std::span<const int32_t> ids, std::span<const float> probs, double u) {
  double mass = 0.0;
  for (int32_t id : ids) mass += probs[static_cast<size_t>(id)];
  double r = u * mass;
  int32_t last_positive = ids.front();
  for (int32_t id : ids) {
    const double p = probs[static_cast<size_t>(id)];
    if (p <= 0.0) continue;
    last_positive = id;
    r -= p;
    if (r < 0.0) return id;
  }
  return last_positive;  // rounding left r >= 0 at the end
}

/// Draws one id over the whole vocab (id order), dropping those below `min_prob`.
int32_t draw_all(std::span<float> probs, float min_prob, double u) {
  double mass = 0.0;
  for (float& p : probs) {
    if (p < min_prob) p = 0.0f;
    mass += p;
  }
  double r = u * mass;
  int32_t last_positive = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    last_positive = static_cast<int32_t>(i);
    r -= probs[i];
    if (r < 0.0) return last_positive;
  }
  return last_positive;
}

/// Temperature, top-k, top-p, min-p and a draw over processed `logits`.
int32_t sample_random(std::span<const float> logits, const step_sequence& seq) {
  const sampling_params& p = seq.params;
  const size_t vocab = logits.size();
  const int32_t best = argmax(logits);
  const float max_logit = logits[static_cast<size_t>(best)];
  if (!std::isfinite(max_logit)) return best;  // everything masked (or +inf): nothing to draw
  const float inv_t = 1.0f / p.temperature;
  thread_local std::vector<float> probs_buffer;
  probs_buffer.resize(vocab);
  std::span<float> probs(probs_buffer);
  double total = 0.0;
  for (size_t i = 0; i < vocab; ++i) {  // unnormalised: the best id has weight 1
    probs[i] = std::isnan(logits[i]) ? 0.0f : std::exp((logits[i] - max_logit) * inv_t);
    total += probs[i];
  }
  const double u = counter_uniform(seq.seed, static_cast<uint64_t>(seq.num_generated));
  const bool use_top_k = top_k_active(p, vocab);
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return draw_all(probs, p.min_p, u);

  std::vector<int32_t> ids;
  if (use_top_k) {
    ids = top_ids(logits, static_cast<size_t>(p.top_k));
    if (use_top_p) {
      double mass = 0.0;
      for (int32_t id : ids) mass += probs[static_cast<size_t>(id)];
      cut_nucleus(ids, probs, p.top_p, mass);
    }
  } else {
    // NOTE: grow a partial sort until it holds the nucleus, instead of sorting the vocab.
    for (size_t guess = first_nucleus_guess;; guess *= 4) {
      ids = top_ids(logits, std::min(guess, vocab));
      if (cut_nucleus(ids, probs, p.top_p, total) || ids.size() == vocab) break;
    }
  }
  if (p.min_p > 0.0f) {  // probabilities relative to the best, which is ids.front()
    const float threshold = p.min_p * probs[static_cast<size_t>(ids.front())];
    auto first_below = std::find_if(ids.begin() + 1, ids.end(), [&](int32_t id) {
      return probs[static_cast<size_t>(id)] < threshold;
    });
    ids.erase(first_below, ids.end());
  }
  return draw(ids, probs, u);
}

}  // namespace

sampled_token sample_token(std::span<float> logits, const step_sequence& seq,
                           std::span<const int32_t> eos_token_ids) {
  sampled_token out;
  out.seq_id = seq.seq_id;
  if (logits.empty()) return out;
  const sampling_params& p = seq.params;
  if (p.uses_penalties() && seq.history)
    apply_penalties(logits, p, *seq.history, seq.prompt_len);
  if (seq.suppress_eos) {
    mask_tokens(logits, eos_token_ids);
    mask_tokens(logits, p.stop_token_ids);
  }
  const double lse = log_sum_exp(logits);
  auto logprob_of = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - lse);
  };
  if (p.num_logprobs > 0) {
    for (int32_t id : top_ids(logits, static_cast<size_t>(p.num_logprobs)))
      out.top_logprobs.push_back({id, logprob_of(id)});
  }
  const bool greedy = p.greedy() || p.temperature < min_temperature;
  out.token_id = greedy ? argmax(logits) : sample_random(logits, seq);
  out.logprob = logprob_of(out.token_id);
  return out;
}

}  // namespace actorserve::gpu
