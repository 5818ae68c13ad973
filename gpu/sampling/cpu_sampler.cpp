#include "gpu/sampling/cpu_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu/sampling/counter_rng.hpp"
#include "gpu/sampling/logits_ops.hpp"

namespace actorserve::gpu {
namespace {

/// Below this temperature sampling is greedy (as vLLM's _SAMPLING_EPS): exp() would overflow.
constexpr float min_temperature = 1e-5f;
/// Probability buckets that order the vocab coarsely without sorting it: bucket b holds ids
/// whose probability relative to the best lies in (2^-(b+1)/8, 2^-b/8]; the last holds the rest.
constexpr int buckets_per_octave = 8;
constexpr int num_buckets = 128;

/// Candidate ids in rank order of groups: group g is ids[bounds[g], bounds[g + 1]); every id of
/// a group ranks before every id of a later group; inside a group the order is arbitrary.
struct ranked_groups {
  std::vector<int32_t> ids;
  std::vector<size_t> bounds;
};

/// Groups all ids by probability bucket (a counting sort, O(vocab)).
ranked_groups bucket_by_probability(std::span<const float> logits, float max_logit, float inv_t) {
  const double scale = static_cast<double>(inv_t) * buckets_per_octave / std::log(2.0);
  thread_local std::vector<uint8_t> bucket_of;
  bucket_of.resize(logits.size());
  ranked_groups g;
  g.bounds.assign(num_buckets + 1, 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double d = (static_cast<double>(max_logit) - logits[i]) * scale;
    const int b = d < num_buckets - 1 ? static_cast<int>(d) : num_buckets - 1;  // NaN: last
    bucket_of[i] = static_cast<uint8_t>(b);
    ++g.bounds[static_cast<size_t>(b) + 1];
  }
  for (size_t b = 0; b < num_buckets; ++b) g.bounds[b + 1] += g.bounds[b];
  g.ids.resize(logits.size());
  std::vector<size_t> next(g.bounds.begin(), g.bounds.end() - 1);
  for (size_t i = 0; i < logits.size(); ++i) g.ids[next[bucket_of[i]]++] = static_cast<int32_t>(i);
  return g;
}

double group_mass(std::span<const int32_t> ids, std::span<const float> weights) {
  double mass = 0.0;
  for (int32_t id : ids) mass += weights[static_cast<size_t>(id)];
  return mass;
}

std::span<int32_t> group(ranked_groups& g, size_t i) {
  return std::span<int32_t>(g.ids).subspan(g.bounds[i], g.bounds[i + 1] - g.bounds[i]);
}

/// Cuts `g` to the top-p nucleus: the ids whose probability mass before them (in rank order)
/// is below `target`.
void cut_nucleus(std::span<const float> logits, std::span<const float> probs, ranked_groups& g,
                 double target) {
  for (size_t i = 0; i + 1 < g.bounds.size(); ++i) {
    const double mass = group_mass(group(g, i), probs);
    if (mass < target) {  // the whole group lies inside the nucleus
      target -= mass;
      continue;
    }
    const size_t kept = mass_prefix(logits, probs, group(g, i), target,
                                    prefix_rule::mass_before_below);
    if (kept < group(g, i).size()) {
      g.bounds.resize(i + 2);
      g.bounds[i + 1] = g.bounds[i] + kept;
      g.ids.resize(g.bounds[i + 1]);
      return;
    }
    target -= mass;  // rounding: the group fell just short, go on
  }
}

/// Draws from `g` walked best first with weights[id] and uniform `u` in [0, 1): the id at which
/// the running mass first exceeds u * total.
int32_t draw_ranked(std::span<const float> logits, std::span<const float> weights,
                    ranked_groups& g, double u) {
  double r = u * group_mass(g.ids, weights);
  size_t last_positive_group = 0;
  for (size_t i = 0; i + 1 < g.bounds.size(); ++i) {
    const double mass = group_mass(group(g, i), weights);
    if (mass > 0.0) last_positive_group = i;
    if (mass <= r) {
      r -= mass;
      continue;
    }
    std::span<int32_t> ids = group(g, i);
    const size_t skipped = mass_prefix(logits, weights, ids, r, prefix_rule::mass_through_at_most);
    if (skipped < ids.size()) return best_of(logits, ids.subspan(skipped));
    r -= mass;  // rounding: go on
  }
  // Rounding left the walk past the end: the worst positive-weight id, as a plain walk would.
  std::span<int32_t> ids = group(g, last_positive_group);
  sort_ids(logits, ids);
  for (auto it = ids.rbegin(); it != ids.rend(); ++it)
    if (weights[static_cast<size_t>(*it)] > 0.0f) return *it;
  return g.ids.front();
}

/// Draws one id over the whole vocab in id order, dropping those below `min_prob`.
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
  for (size_t i = 0; i < vocab; ++i) {  // unnormalised: the best id has weight exactly 1
    probs[i] = std::isnan(logits[i]) ? 0.0f : std::exp((logits[i] - max_logit) * inv_t);
  }
  const double u = counter_uniform(seq.seed, static_cast<uint64_t>(seq.num_generated));
  const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return draw_all(probs, p.min_p, u);

  ranked_groups g;
  if (use_top_k) {
    g.ids = top_ids(logits, static_cast<size_t>(p.top_k));
    g.bounds = {0, g.ids.size()};
  } else {
    g = bucket_by_probability(logits, max_logit, inv_t);
  }
  if (use_top_p) cut_nucleus(logits, probs, g, p.top_p * group_mass(g.ids, probs));
  // min-p is relative to the best probability, which is weight 1 here.
  if (p.min_p > 0.0f)
    for (int32_t id : g.ids)
      if (probs[static_cast<size_t>(id)] < p.min_p) probs[static_cast<size_t>(id)] = 0.0f;
  return draw_ranked(logits, probs, g, u);
}

}  // namespace

sampled_token sample_token(std::span<float> logits, const step_sequence& seq,
                           std::span<const int32_t> eos_token_ids) {
  sampled_token out;
  out.seq_id = seq.seq_id;
  if (logits.empty()) return out;
  const sampling_params& p = seq.params;
  if (seq.allowed_tokens)
    if (const std::vector<uint32_t>* words = seq.allowed_tokens->wait()) apply_token_mask(logits, *words);
  add_logit_bias(logits, p.logit_bias);
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
