#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "sampler_test_util.hpp"

namespace actorserve::testing {
namespace {

constexpr int num_draws = 20000;
/// chi-square critical values at p = 0.001 for 1..9 degrees of freedom.
constexpr double chi2_crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88};

/// Checks `counts` against `expected` probabilities (zero where a token must never appear).
void expect_distribution(const std::vector<int>& counts, const std::vector<double>& expected) {
  ASSERT_EQ(counts.size(), expected.size());
  double chi2 = 0.0;
  int dof = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double freq = static_cast<double>(counts[i]) / num_draws;
    EXPECT_NEAR(freq, expected[i], 0.015) << "token " << i;
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " must be filtered out";
      continue;
    }
    const double e = expected[i] * num_draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++dof;
  }
  ASSERT_GE(dof, 1);
  EXPECT_LT(chi2, chi2_crit[dof]) << "chi-square with " << dof << " degrees of freedom";
}

/// softmax at `temperature` restricted to `keep` ids, renormalised.
std::vector<double> restricted(const std::vector<float>& logits, double temperature,
                               const std::vector<int32_t>& keep) {
  std::vector<double> p = softmax(logits, temperature);
  std::vector<double> out(p.size(), 0.0);
  double mass = 0.0;
  for (int32_t id : keep) mass += p[static_cast<size_t>(id)];
  for (int32_t id : keep) out[static_cast<size_t>(id)] = p[static_cast<size_t>(id)] / mass;
  return out;
}

const std::vector<float> logits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.9f, -0.5f, 1.7f};
// Sorted: 1 (2.5), 4 (2.0), 7 (1.7), 0 (1.0), 5 (0.9), 2 (0.3), 6 (-0.5), 3 (-1.0).

TEST(SamplerDistribution, TemperatureOneMatchesSoftmax) {
  expect_distribution(draw_counts(logits, sampling_params{}, num_draws), softmax(logits));
}

TEST(SamplerDistribution, TemperatureScalesLogits) {
  sampling_params p;
  p.temperature = 0.5f;
  expect_distribution(draw_counts(logits, p, num_draws), softmax(logits, 0.5));
  p.temperature = 2.0f;
  expect_distribution(draw_counts(logits, p, num_draws), softmax(logits, 2.0));
}

TEST(SamplerDistribution, TopKRenormalisesOverTheBestK) {
  sampling_params p;
  p.top_k = 3;
  expect_distribution(draw_counts(logits, p, num_draws), restricted(logits, 1.0, {1, 4, 7}));
}

TEST(SamplerDistribution, TopPKeepsTheSmallestNucleus) {
  const std::vector<double> probs = softmax(logits);
  // The nucleus keeps ids while the mass before them is below top_p.
  const double before_third = probs[1] + probs[4];
  sampling_params p;
  p.top_p = static_cast<float>(before_third + 0.01);  // keeps 1, 4 and 7
  expect_distribution(draw_counts(logits, p, num_draws), restricted(logits, 1.0, {1, 4, 7}));
  p.top_p = static_cast<float>(before_third - 0.01);  // keeps 1 and 4
  expect_distribution(draw_counts(logits, p, num_draws), restricted(logits, 1.0, {1, 4}));
}

TEST(SamplerDistribution, TopPAppliesAfterTopK) {
  const std::vector<double> probs = restricted(logits, 1.0, {1, 4, 7, 0});
  sampling_params p;
  p.top_k = 4;
  p.top_p = static_cast<float>(probs[1] + probs[4] + 0.01);  // of the top-4 mass: keeps 1, 4, 7
  expect_distribution(draw_counts(logits, p, num_draws), restricted(logits, 1.0, {1, 4, 7}));
}

TEST(SamplerDistribution, MinPFiltersRelativeToTheBest) {
  const std::vector<double> probs = softmax(logits);
  sampling_params p;
  p.min_p = static_cast<float>(probs[0] / probs[1] - 0.01);  // keeps ids at least as likely as 0
  const std::vector<double> want = restricted(logits, 1.0, {1, 4, 7, 0});
  expect_distribution(draw_counts(logits, p, num_draws), want);
  p.top_k = 6;  // same filter through the sorted path
  expect_distribution(draw_counts(logits, p, num_draws), want);
}

/// The top-p nucleus of `logits` at `temperature`, computed by a full sort in the test.
std::vector<char> nucleus_of(const std::vector<float>& logits, double temperature, double top_p,
                             std::vector<int32_t>& order, size_t& size) {
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  const std::vector<double> probs = softmax(logits, temperature);
  std::vector<char> in_nucleus(logits.size(), 0);
  double cum = 0.0;
  size = 0;
  for (int32_t id : order) {
    if (cum >= top_p) break;
    cum += probs[static_cast<size_t>(id)];
    in_nucleus[static_cast<size_t>(id)] = 1;
    ++size;
  }
  return in_nucleus;
}

TEST(SamplerDistribution, NucleusOfAPeakedLargeVocabIsExact) {
  std::mt19937 gen(77);
  std::normal_distribution<float> dist(0.0f, 2.5f);
  std::vector<float> big(32000);
  for (float& l : big) l = dist(gen);
  std::vector<int32_t> order;
  size_t size = 0;
  const std::vector<char> in_nucleus = nucleus_of(big, 0.8, 0.9, order, size);
  ASSERT_GT(size, 50u);
  sampling_params p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  std::vector<char> seen(big.size(), 0);
  size_t distinct = 0;
  for (int32_t step = 0; step < 600; ++step) {
    std::vector<float> scratch = big;
    const int32_t tok = gpu::sample_token(scratch, make_seq(p, 9, step), {}).token_id;
    ASSERT_TRUE(in_nucleus[static_cast<size_t>(tok)]) << "token " << tok;
    distinct += !seen[static_cast<size_t>(tok)];
    seen[static_cast<size_t>(tok)] = 1;
  }
  EXPECT_GT(distinct, 100u) << "nucleus of " << size;
}

TEST(SamplerDistribution, NucleusOfAFlatLargeVocabIsExact) {
  // 32000 near-equal logits: a 0.5 nucleus holds thousands of ids in one probability bucket.
  std::vector<float> big(32000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 97) * 0.001f;
  std::vector<int32_t> order;
  size_t nucleus = 0;
  const std::vector<char> in_nucleus = nucleus_of(big, 1.0, 0.5, order, nucleus);
  ASSERT_GT(nucleus, 4096u);
  sampling_params p;
  p.top_p = 0.5f;
  int deep = 0;
  for (int32_t step = 0; step < 300; ++step) {
    std::vector<float> scratch = big;
    const int32_t tok = gpu::sample_token(scratch, make_seq(p, 3, step), {}).token_id;
    ASSERT_TRUE(in_nucleus[static_cast<size_t>(tok)]) << "token " << tok;
    deep += std::find(order.begin(), order.begin() + 256, tok) == order.begin() + 256;
  }
  EXPECT_GT(deep, 200);  // most draws come from beyond the first 256 candidates
}

}  // namespace
}  // namespace actorserve::testing
