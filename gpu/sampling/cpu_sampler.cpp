#include "gpu/sampling/cpu_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/sampling/counter_rng.hpp"
#include "gpu/sampling/logits_ops.hpp"

namespace actorserve::gpu {
namespace {

/// Below this temperature sampling is greedy (as vLLM's _SAMPLING_EPS): exp() would overflow.
constexpr float min_temperature = 1e-5f;
/// Probability buckets that locate the nucleus without sorting the vocab: bucket b holds ids
/// whose probability relative to the best lies in (2^-(b+1)/8, 2^-b/8]; the last holds the rest.
constexpr int buckets_per_octave = 8;
constexpr int num_buckets = 128;

/// Keeps the prefix of `ids` (best first) whose mass before each id is below `target`.
void cut_nucleus(std::vector<int32_t>& ids, std::span<const float> probs, double target) {
  double cum = 0.0;
  auto it = ids.begin();
  for (; it != ids.end() && cum < target; ++it) cum += probs[static_cast<size_t>(*it)];
  ids.erase(it, ids.end());
}

/// How many of `ids` (reordered: the kept ones first) the nucleus keeps when `target` mass is
/// left to fill; npos when all are kept without filling it.
/// NOTE: quickselect by mass (halving with nth_element), so a flat bucket costs O(n), not a sort.
size_t cut_in_bucket(std::span<const float> logits, std::span<const float> probs,
                     std::span<int32_t> ids, double target) {
  constexpr size_t sort_below = 64;
  size_t lo = 0;
  size_t hi = ids.size();
  while (hi - lo > sort_below) {
    const size_t mid = lo + (hi - lo) / 2;
    select_ids(logits, ids.subspan(lo, hi - lo), mid - lo);
    double mass = 0.0;
    for (size_t i = lo; i < mid; ++i) mass += probs[static_cast<size_t>(ids[i])];
    if (mass < target) {  // [lo, mid) is all kept
      target -= mass;
      lo = mid;
    } else {
      hi = mid;  // the cut lies within [lo, mid]
    }
  }
  sort_ids(logits, ids.subspan(lo, hi - lo));
  double cum = 0.0;
  size_t i = lo;
  for (; i < hi && cum < target; ++i) cum += probs[static_cast<size_t>(ids[i])];
  if (cum >= target || hi < ids.size()) return i;
  return std::string::npos;
}

/// The top-p nucleus over all of `logits` (probs: unnormalised, summing to `total`).
/// NOTE: ids are grouped by probability bucket (a counting sort); only the one bucket where the
/// nucleus ends is searched, so the cost is O(vocab), not a vocab sort. The kept ids come in no
/// particular (but deterministic) order.
std::vector<int32_t> nucleus(std::span<const float> logits, std::span<const float> probs,
                             float max_logit, float inv_t, double target) {
  const size_t vocab = logits.size();
  const double scale = static_cast<double>(inv_t) * buckets_per_octave / std::log(2.0);
  thread_local std::vector<uint8_t> bucket_of;
  bucket_of.resize(vocab);
  size_t offset[num_buckets + 1] = {};
  double mass[num_buckets] = {};
  for (size_t i = 0; i < vocab; ++i) {
    const double d = (static_cast<double>(max_logit) - logits[i]) * scale;
    const int b = d < num_buckets - 1 ? static_cast<int>(d) : num_buckets - 1;  // NaN: last
    bucket_of[i] = static_cast<uint8_t>(b);
    ++offset[b + 1];
    mass[b] += probs[i];
  }
  for (int b = 0; b < num_buckets; ++b) offset[b + 1] += offset[b];
  std::vector<int32_t> ids(vocab);
  size_t next[num_buckets];
  std::copy(offset, offset + num_buckets, next);
  for (size_t i = 0; i < vocab; ++i) ids[next[bucket_of[i]]++] = static_cast<int32_t>(i);

  double remaining = target;
  for (int b = 0; b < num_buckets; ++b) {
    if (mass[b] < remaining) {  // the whole bucket lies inside the nucleus
      remaining -= mass[b];
      continue;
    }
    const size_t kept = cut_in_bucket(logits, probs,
        std::span<int32_t>(ids.data() + offset[b], offset[b + 1] - offset[b]), remaining);
    if (kept != std::string::npos) {
      ids.resize(offset[b] + kept);
      return ids;
    }
    remaining -= mass[b];  // rounding: the bucket fell just short, go on
  }
  return ids;
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
  for (size_t i = 0; i < vocab; ++i) {  // unnormalised: the best id has weight exactly 1
    probs[i] = std::isnan(logits[i]) ? 0.0f : std::exp((logits[i] - max_logit) * inv_t);
    total += probs[i];
  }
  const double u = counter_uniform(seq.seed, static_cast<uint64_t>(seq.num_generated));
  const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return draw_all(probs, p.min_p, u);

  std::vector<int32_t> ids;
  if (use_top_k) {
    ids = top_ids(logits, static_cast<size_t>(p.top_k));
    if (use_top_p) {
      double mass = 0.0;
      for (int32_t id : ids) mass += probs[static_cast<size_t>(id)];
      cut_nucleus(ids, probs, p.top_p * mass);
    }
  } else {
    ids = nucleus(logits, probs, max_logit, inv_t, p.top_p * total);
  }
  // min-p is relative to the best probability, which is weight 1 here.
  std::erase_if(ids, [&](int32_t id) { return probs[static_cast<size_t>(id)] < p.min_p; });
  if (ids.empty()) return best;  // only for top_p == 0, which validation rejects
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
