// The optimised sampler (heap top-k, bucketed nucleus, quickselect draw) against a plain
// reference written here: full sort, top-k, top-p, min-p, then a walk best first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gpu/sampling/counter_rng.hpp"
#include "sampler_test_util.hpp"

namespace actorserve::testing {
namespace {

int32_t reference_sample(const std::vector<float>& logits, const sampling_params& p, double u) {
  const size_t vocab = logits.size();
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  const float max_logit = logits[static_cast<size_t>(order[0])];
  const float inv_t = 1.0f / p.temperature;
  std::vector<double> w(vocab);
  for (size_t i = 0; i < vocab; ++i) w[i] = std::exp((logits[i] - max_logit) * inv_t);
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < vocab;
  const bool top_p = p.top_p < 1.0f;
  if (!top_k && !top_p) {  // no truncation: the walk goes in id order
    double mass = 0.0;
    for (double& x : w) mass += x = x < p.min_p ? 0.0 : x;
    double r = u * mass;
    for (size_t i = 0; i < vocab; ++i) {
      if (w[i] <= 0.0) continue;
      r -= w[i];
      if (r < 0.0) return static_cast<int32_t>(i);
    }
    return -1;
  }
  if (top_k) order.resize(static_cast<size_t>(p.top_k));
  if (top_p) {
    double mass = 0.0;
    for (int32_t id : order) mass += w[static_cast<size_t>(id)];
    double cum = 0.0;
    size_t keep = 0;
    while (keep < order.size() && cum < p.top_p * mass)
      cum += w[static_cast<size_t>(order[keep++])];
    order.resize(keep);
  }
  double mass = 0.0;
  for (int32_t id : order) {
    double& x = w[static_cast<size_t>(id)];
    if (x < p.min_p) x = 0.0;
    mass += x;
  }
  double r = u * mass;
  for (int32_t id : order) {
    if (w[static_cast<size_t>(id)] <= 0.0) continue;
    r -= w[static_cast<size_t>(id)];
    if (r < 0.0) return id;
  }
  return -1;
}

TEST(SamplerReference, OptimisedPathsDrawWhatAPlainSortedWalkDraws) {
  std::mt19937 gen(31337);
  int cases = 0;
  int mismatches = 0;
  for (size_t vocab : {1u, 2u, 17u, 97u, 1000u, 5003u}) {
    for (int trial = 0; trial < 60; ++trial) {
      const float scale = std::uniform_real_distribution<float>(0.05f, 6.0f)(gen);
      std::normal_distribution<float> dist(0.0f, scale);
      std::vector<float> logits(vocab);
      for (float& l : logits) l = std::round(dist(gen) * 8.0f) / 8.0f;  // many exact ties
      sampling_params p;
      p.temperature = std::uniform_real_distribution<float>(0.3f, 1.7f)(gen);
      const int kind = trial % 6;
      if (kind == 1 || kind == 4) p.top_k = std::uniform_int_distribution<int>(1, 80)(gen);
      if (kind == 2 || kind == 4 || kind == 5)
        p.top_p = std::uniform_real_distribution<float>(0.05f, 0.99f)(gen);
      if (kind == 3 || kind == 5) p.min_p = std::uniform_real_distribution<float>(0.0f, 0.5f)(gen);
      const auto seq = make_seq(p, 1000 + static_cast<uint64_t>(trial), trial);
      std::vector<float> scratch = logits;
      const int32_t got = gpu::sample_token(scratch, seq, {}).token_id;
      const int32_t want = reference_sample(
          logits, p, gpu::counter_uniform(seq.seed, static_cast<uint64_t>(seq.num_generated)));
      ++cases;
      mismatches += got != want;
      EXPECT_NE(want, -1);
    }
  }
  // Sums taken in another order may move a draw that lands within rounding of a boundary.
  EXPECT_LE(mismatches, 1) << "of " << cases;
}

}  // namespace
}  // namespace actorserve::testing
