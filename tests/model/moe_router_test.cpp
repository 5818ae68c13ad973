// The router's maths and the token -> expert permutation, directly: scores, top-k, ties, group
// limits, renormalisation, scaling, sigmoid; the permutation's order, inverse and round trip, and
// its rows split by contiguous expert ranges (expert parallel).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gpu/model/expert_permutation.hpp"
#include "gpu/model/moe_router.hpp"

namespace actorserve::testing {
namespace {

moe_config greedy(int64_t experts, int64_t top_k, bool renormalize = false, double scaling = 1.0) {
  moe_config m;
  m.num_experts = experts;
  m.top_k = top_k;
  m.renormalize = renormalize;
  m.routed_scaling_factor = scaling;
  return m;
}

moe_config grouped(int64_t experts, int64_t top_k, int64_t groups, int64_t topk_groups) {
  moe_config m = greedy(experts, top_k);
  m.topk_method = moe_topk_method::group_limited_greedy;
  m.num_groups = groups;
  m.topk_groups = topk_groups;
  return m;
}

struct routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

routed route(const moe_config& m, const std::vector<float>& logits) {
  gpu::moe_router r(m);
  const size_t tokens = logits.size() / static_cast<size_t>(m.num_experts);
  routed out{std::vector<int32_t>(tokens * static_cast<size_t>(m.top_k)),
             std::vector<float>(tokens * static_cast<size_t>(m.top_k))};
  r.route(logits.data(), tokens, out.experts.data(), out.weights.data());
  return out;
}

std::vector<float> softmax(const std::vector<float>& x) {
  double max_x = *std::max_element(x.begin(), x.end()), sum = 0;
  std::vector<float> out;
  for (float v : x) sum += std::exp(v - max_x);
  for (float v : x) out.push_back(static_cast<float>(std::exp(v - max_x) / sum));
  return out;
}

TEST(moe_router, softmax_top_k_by_descending_score) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  const auto p = softmax(logits);
  auto r = route(greedy(4, 2), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], p[1], 1e-7);
  EXPECT_NEAR(r.weights[1], p[2], 1e-7);
}

TEST(moe_router, renormalised_weights_sum_to_one_and_keep_their_ratio) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  const auto p = softmax(logits);
  auto r = route(greedy(4, 2, true), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], p[1] / (p[1] + p[2]), 1e-6);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-6);
}

TEST(moe_router, scaling_multiplies_the_weights_after_renormalisation) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -2.0f};
  auto plain = route(greedy(6, 3), logits);
  auto scaled = route(greedy(6, 3, false, 2.5), logits);
  EXPECT_EQ(plain.experts, scaled.experts);
  for (size_t j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(scaled.weights[j], plain.weights[j] * 2.5f);
  auto both = route(greedy(6, 3, true, 2.5), logits);
  EXPECT_NEAR(both.weights[0] + both.weights[1] + both.weights[2], 2.5f, 1e-6);
}

TEST(moe_router, ties_go_to_the_lower_expert_index) {
  const std::vector<float> logits = {2.0f, 5.0f, 5.0f, 1.0f, 5.0f};
  EXPECT_EQ(route(greedy(5, 2), logits).experts, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(route(greedy(5, 3), logits).experts, (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(route(greedy(5, 4), logits).experts, (std::vector<int32_t>{1, 2, 4, 0}));
  // All equal: the first k, with equal weights.
  auto r = route(greedy(8, 3, true), std::vector<float>(8, 0.25f));
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2}));
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 1.0f / 3.0f);
}

TEST(moe_router, k_equal_to_the_number_of_experts_lists_them_all_by_score) {
  const std::vector<float> logits = {0.1f, -0.3f, 0.7f, 0.2f};
  auto r = route(greedy(4, 4), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3, 0, 1}));
  EXPECT_NEAR(std::accumulate(r.weights.begin(), r.weights.end(), 0.0f), 1.0f, 1e-6);
  auto renormalised = route(greedy(4, 4, true), logits);
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(renormalised.weights[j], r.weights[j], 1e-6);
}

TEST(moe_router, sigmoid_scores_each_expert_on_its_own) {
  moe_config m = greedy(4, 2);
  m.scoring = moe_scoring::sigmoid;
  const std::vector<float> logits = {-1.0f, 2.0f, 0.5f, 3.0f};
  auto r = route(m, logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(r.weights[0], 1.0 / (1.0 + std::exp(-3.0)), 1e-6);
  EXPECT_NEAR(r.weights[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  m.renormalize = true;
  m.routed_scaling_factor = 2.0;
  auto n = route(m, logits);
  EXPECT_NEAR(n.weights[0] + n.weights[1], 2.0f, 1e-6);
  EXPECT_NEAR(n.weights[0] / n.weights[1], r.weights[0] / r.weights[1], 1e-6);
}

TEST(moe_router, group_limits_keep_the_best_groups_only) {
  // 8 experts in 4 groups of 2; group maxima 9, 8, 7, 1: groups 0 and 1 are kept.
  const std::vector<float> logits = {9.0f, 0.0f, 0.0f, 8.0f, 7.0f, 6.9f, 1.0f, 1.0f};
  const auto p = softmax(logits);
  EXPECT_EQ(route(greedy(8, 3), logits).experts, (std::vector<int32_t>{0, 3, 4}));
  auto r = route(grouped(8, 3, 4, 2), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 3, 1}));   // 1 and 2 tie at 0: the lower index
  // The weights are the scores over all experts (taken before the mask), not over the kept ones.
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(r.weights[j], p[static_cast<size_t>(r.experts[j])], 1e-7);
  // Keeping three groups lets group 2 in.
  EXPECT_EQ(route(grouped(8, 3, 4, 3), logits).experts, (std::vector<int32_t>{0, 3, 4}));
  // Equal group maxima: the lower group is kept.
  const std::vector<float> tied = {1.0f, 5.0f, 5.0f, 4.9f, 0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(route(grouped(8, 2, 4, 1), tied).experts, (std::vector<int32_t>{1, 0}));
}

/// transformers' way, literally: mask the groups not kept to 0, then pick the k best one by one.
std::vector<int32_t> reference_choice(const moe_config& m, std::vector<float> scores) {
  const size_t n = scores.size(), per = n / static_cast<size_t>(m.num_groups);
  if (m.topk_method == moe_topk_method::group_limited_greedy) {
    std::vector<float> group_max(static_cast<size_t>(m.num_groups));
    for (size_t e = 0; e < n; ++e) group_max[e / per] = std::max(group_max[e / per], scores[e]);
    std::vector<bool> kept(group_max.size());
    for (int64_t i = 0; i < m.topk_groups; ++i) {
      size_t best = 0;
      while (kept[best]) ++best;
      for (size_t g = 0; g < group_max.size(); ++g)
        if (!kept[g] && group_max[g] > group_max[best]) best = g;
      kept[best] = true;
    }
    for (size_t e = 0; e < n; ++e)
      if (!kept[e / per]) scores[e] = 0.0f;
  }
  std::vector<int32_t> chosen;
  for (int64_t i = 0; i < m.top_k; ++i) {
    size_t best = n;
    for (size_t e = 0; e < n; ++e)
      if (std::find(chosen.begin(), chosen.end(), int32_t(e)) == chosen.end() && (best == n || scores[e] > scores[best]))
        best = e;
    chosen.push_back(static_cast<int32_t>(best));
  }
  return chosen;
}

TEST(moe_router, many_tokens_agree_with_a_literal_reference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const moe_config& m : {greedy(8, 2, true), greedy(16, 4), grouped(16, 4, 4, 2), grouped(12, 6, 6, 3)}) {
    const size_t tokens = 50, e = static_cast<size_t>(m.num_experts), k = static_cast<size_t>(m.top_k);
    std::vector<float> logits(tokens * e);
    for (float& v : logits) v = normal(rng);
    auto r = route(m, logits);
    for (size_t t = 0; t < tokens; ++t) {
      std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(t * e),
                             logits.begin() + static_cast<std::ptrdiff_t>((t + 1) * e));
      const auto p = softmax(row);
      EXPECT_EQ(std::vector<int32_t>(r.experts.begin() + static_cast<std::ptrdiff_t>(t * k),
                                     r.experts.begin() + static_cast<std::ptrdiff_t>((t + 1) * k)),
                reference_choice(m, p))
          << "token " << t;
      // One token routed alone gets what it got in the batch.
      auto alone = route(m, row);
      for (size_t j = 0; j < k; ++j) EXPECT_EQ(alone.weights[j], r.weights[t * k + j]);
    }
  }
}

TEST(moe_router, deepseek_v2_group_limited_weights_are_softmax_scores_times_the_scaling) {
  // deepseek-v2-qlora-yarn-bf16's router: 8 experts in 4 groups, 2 groups kept, top 3, scaling
  // 2.5, never renormalised (transformers' DeepSeek-V2 router ignores norm_topk_prob).
  moe_config m = grouped(8, 3, 4, 2);
  m.routed_scaling_factor = 2.5;
  // Group maxima 0.9, 3.0, 2.0, 2.5: groups 1 and 3 are kept although expert 4 (group 2) beats 7.
  const std::vector<float> logits = {0.9f, 0.1f, 3.0f, 1.0f, 2.0f, -1.0f, 0.5f, 2.5f};
  const auto p = softmax(logits);
  auto r = route(m, logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 7, 3}));
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(r.weights[j], 2.5f * p[static_cast<size_t>(r.experts[j])], 1e-6) << j;
  EXPECT_LT(r.weights[0] + r.weights[1] + r.weights[2], 2.5f);
}

TEST(expert_permutation, groups_pairs_by_expert_in_token_order) {
  // 3 tokens, top 2, 4 experts: token 0 -> {2, 0}, token 1 -> {0, 1}, token 2 -> {2, 1}.
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1};
  gpu::expert_permutation p;
  gpu::permute_by_expert(experts, 2, 4, p);
  EXPECT_EQ(p.offsets, (std::vector<int32_t>{0, 2, 4, 6, 6}));
  EXPECT_EQ(p.count(3), 0);
  EXPECT_EQ(p.source_token, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(p.slot_row, (std::vector<int32_t>{4, 0, 1, 2, 5, 3}));
  gpu::permute_by_expert({}, 2, 4, p);
  EXPECT_EQ(p.offsets, (std::vector<int32_t>(5, 0)));
  EXPECT_EQ(p.num_rows(), 0u);
}

TEST(expert_permutation, a_range_of_experts_gathers_and_combines_only_its_rows) {
  // As above: token 0 -> {2, 0}, token 1 -> {0, 1}, token 2 -> {2, 1}; two shards of experts
  // [0, 2) and [2, 4). The second holds rows [4, 6): token 0's and token 2's pair with expert 2.
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1};
  gpu::expert_permutation p;
  gpu::permute_by_expert(experts, 2, 4, p);
  const gpu::row_range low = p.rows_of(0, 2), high = p.rows_of(2, 4);
  EXPECT_EQ(low.begin, 0u);
  EXPECT_EQ(low.end, 4u);
  EXPECT_EQ(high.begin, 4u);
  EXPECT_EQ(high.end, 6u);
  const std::vector<float> x = {10.0f, 20.0f, 30.0f};   // one float per token
  std::vector<float> gathered(high.size());
  gpu::gather_rows(x.data(), 1, p, high, gathered.data());
  EXPECT_EQ(gathered, (std::vector<float>{10.0f, 30.0f}));
  // Each shard's combine sums its own slots; token 1 routed to neither of expert 2's rows gets 0,
  // and the two shards' outputs add up to the whole combine.
  const std::vector<float> y = {1.0f, 2.0f, 4.0f, 8.0f, 16.0f, 32.0f};   // row r's expert output
  const std::vector<float> w = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> whole(3), lo(3), hi(3, -1.0f);
  gpu::combine_rows(y.data(), 1, p, w.data(), 2, 0, 3, whole.data());
  gpu::combine_rows(y.data(), 1, p, low, w.data(), 2, 0, 3, lo.data());
  gpu::combine_rows(y.data() + high.begin, 1, p, high, w.data(), 2, 0, 3, hi.data());
  EXPECT_EQ(hi, (std::vector<float>{16.0f, 0.0f, 32.0f}));
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(lo[t] + hi[t], whole[t]) << "token " << t;
  // A range with no rows: nothing gathered, every token's output zero.
  const gpu::row_range none = p.rows_of(3, 4);
  EXPECT_EQ(none.size(), 0u);
  gpu::combine_rows(nullptr, 1, p, none, w.data(), 2, 0, 3, hi.data());
  EXPECT_EQ(hi, (std::vector<float>(3, 0.0f)));
}

TEST(expert_permutation, round_trip_brings_every_row_back) {
  std::mt19937 rng(3);
  const size_t tokens = 37, k = 3, num_experts = 8, width = 5;
  std::vector<int32_t> experts;
  for (size_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(num_experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    experts.insert(experts.end(), all.begin(), all.begin() + k);
  }
  gpu::expert_permutation p;
  gpu::permute_by_expert(experts, k, num_experts, p);
  for (size_t i = 0; i < tokens * k; ++i) {
    const int32_t row = p.slot_row[i];
    EXPECT_EQ(p.source_token[static_cast<size_t>(row)], static_cast<int32_t>(i / k));
    const size_t e = static_cast<size_t>(experts[i]);
    EXPECT_GE(row, p.offsets[e]);
    EXPECT_LT(row, p.offsets[e + 1]);
  }
  for (size_t e = 0; e < num_experts; ++e)   // stable: ascending tokens within an expert
    EXPECT_TRUE(std::is_sorted(p.source_token.begin() + p.offsets[e], p.source_token.begin() + p.offsets[e + 1]));
  std::vector<float> x(tokens * width);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 7.0f;
  std::vector<float> gathered(p.num_rows() * width), back(tokens * width);
  gpu::gather_rows(x.data(), width, p, gathered.data());
  // One-hot weights bring x back exactly; weights summing to w scale it by w.
  std::vector<float> one_hot(tokens * k, 0.0f), quarters(tokens * k, 0.25f);
  for (size_t t = 0; t < tokens; ++t) one_hot[t * k + t % k] = 1.0f;
  gpu::combine_rows(gathered.data(), width, p, one_hot.data(), k, 0, tokens, back.data());
  EXPECT_EQ(back, x);
  gpu::combine_rows(gathered.data(), width, p, quarters.data(), k, 0, tokens, back.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(back[i], 0.75f * x[i]);
}

TEST(expert_permutation, combine_sums_in_ascending_expert_order) {
  // One token, slots to experts 2, 0, 1 with outputs -1e8, 1e8, 1 (rows in expert order 0, 1, 2):
  // in expert order (1e8 + 1) - 1e8 = 0 in fp32; in slot order it would be 1.
  const std::vector<int32_t> experts = {2, 0, 1};
  gpu::expert_permutation p;
  gpu::permute_by_expert(experts, 3, 3, p);
  const std::vector<float> y = {1e8f, 1.0f, -1e8f};
  const std::vector<float> w = {1.0f, 1.0f, 1.0f};
  float out = -5.0f;
  gpu::combine_rows(y.data(), 1, p, w.data(), 3, 0, 1, &out);
  EXPECT_EQ(out, 0.0f);
}

}  // namespace
}  // namespace actorserve::testing
