// The CPU MoE FFN against a literal per-token loop (router, top-k, experts, weighted sum, shared
// experts), a token's output independent of the rest of its step, and the layer split into
// contiguous ranges of whole experts (expert parallel) summing to the whole.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu/cpu/moe_ffn.hpp"

namespace actorserve::testing {
namespace {

constexpr size_t hidden = 24;

std::vector<float> random_vector(std::mt19937& rng, size_t n, float std) {
  std::normal_distribution<float> normal(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

gpu::mlp_weights_f32 random_mlp(std::mt19937& rng, size_t inter) {
  return {random_vector(rng, inter * hidden, 0.2f), random_vector(rng, inter * hidden, 0.2f),
          random_vector(rng, hidden * inter, 0.2f)};
}

/// down(silu(gate x) * up x), in double.
std::vector<double> mlp(const gpu::mlp_weights_f32& m, const float* x, size_t inter) {
  std::vector<double> act(inter), y(hidden, 0.0);
  for (size_t i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    for (size_t j = 0; j < hidden; ++j) {
      g += double(m.gate_proj[i * hidden + j]) * x[j];
      u += double(m.up_proj[i * hidden + j]) * x[j];
    }
    act[i] = g / (1.0 + std::exp(-g)) * u;
  }
  for (size_t o = 0; o < hidden; ++o)
    for (size_t i = 0; i < inter; ++i) y[o] += double(m.down_proj[o * inter + i]) * act[i];
  return y;
}

/// One token the way the model code reads: softmax over the router logits, the k best, their
/// weights renormalised when asked, each chosen expert's MLP times its weight, plus the shared MLP.
std::vector<double> literal_moe(const moe_config& c, const gpu::moe_weights_f32& w, const float* x) {
  const size_t e = static_cast<size_t>(c.num_experts);
  std::vector<double> p(e);
  double max_l = -1e300, sum = 0;
  for (size_t i = 0; i < e; ++i) {
    for (size_t j = 0; j < hidden; ++j) p[i] += double(w.router[i * hidden + j]) * x[j];
    max_l = std::max(max_l, p[i]);
  }
  for (double& v : p) sum += (v = std::exp(v - max_l));
  for (double& v : p) v /= sum;
  std::vector<size_t> chosen;
  double chosen_sum = 0;
  for (int64_t k = 0; k < c.top_k; ++k) {
    size_t best = e;
    for (size_t i = 0; i < e; ++i)
      if (std::find(chosen.begin(), chosen.end(), i) == chosen.end() && (best == e || p[i] > p[best])) best = i;
    chosen.push_back(best);
    chosen_sum += p[best];
  }
  std::vector<double> out(hidden, 0.0);
  for (size_t i : chosen) {
    const double weight = (c.renormalize ? p[i] / chosen_sum : p[i]) * c.routed_scaling_factor;
    const auto y = mlp(w.experts[i], x, static_cast<size_t>(c.expert_intermediate_size));
    for (size_t o = 0; o < hidden; ++o) out[o] += weight * y[o];
  }
  if (!w.shared.empty()) {
    const auto y = mlp(w.shared, x, static_cast<size_t>(c.expert_intermediate_size * c.num_shared_experts));
    for (size_t o = 0; o < hidden; ++o) out[o] += y[o];
  }
  return out;
}

struct moe_case {
  const char* name;
  int64_t experts, top_k, shared;
  bool renormalize;
  double scaling;
};

moe_config config_of(const moe_case& mc) {
  moe_config c;
  c.num_experts = mc.experts;
  c.top_k = mc.top_k;
  c.expert_intermediate_size = 10;
  c.num_shared_experts = mc.shared;
  c.renormalize = mc.renormalize;
  c.routed_scaling_factor = mc.scaling;
  return c;
}

gpu::moe_weights_f32 random_weights(const moe_config& c, std::mt19937& rng) {
  gpu::moe_weights_f32 w;
  w.router = random_vector(rng, static_cast<size_t>(c.num_experts) * hidden, 0.5f);
  for (int64_t e = 0; e < c.num_experts; ++e) w.experts.push_back(random_mlp(rng, 10));
  if (c.num_shared_experts > 0) w.shared = random_mlp(rng, static_cast<size_t>(10 * c.num_shared_experts));
  return w;
}

class moe_ffn_test : public ::testing::TestWithParam<moe_case> {};

TEST_P(moe_ffn_test, matches_a_literal_per_token_loop) {
  const moe_case& mc = GetParam();
  const moe_config c = config_of(mc);
  std::mt19937 rng(17);
  const gpu::moe_weights_f32 w = random_weights(c, rng);
  const size_t rows = 41;
  const auto x = random_vector(rng, rows * hidden, 1.0f);
  gpu::thread_pool pool(2);
  gpu::cpu::moe_ffn ffn(c, static_cast<int64_t>(hidden));
  std::vector<float> out(rows * hidden, 123.0f);
  ffn.forward(pool, w, x.data(), rows, out.data());
  double max_diff = 0, max_ref = 0;
  for (size_t t = 0; t < rows; ++t) {
    const auto ref = literal_moe(c, w, &x[t * hidden]);
    for (size_t o = 0; o < hidden; ++o) {
      max_diff = std::max(max_diff, std::abs(ref[o] - out[t * hidden + o]));
      max_ref = std::max(max_ref, std::abs(ref[o]));
    }
  }
  EXPECT_LT(max_diff / max_ref, 1e-5) << mc.name;
  // A token alone, or with other tokens in another order, gets the very same bits.
  for (size_t t : {size_t(0), size_t(17), rows - 1}) {
    std::vector<float> one(hidden);
    ffn.forward(pool, w, &x[t * hidden], 1, one.data());
    EXPECT_EQ(one, std::vector<float>(out.begin() + static_cast<std::ptrdiff_t>(t * hidden),
                                      out.begin() + static_cast<std::ptrdiff_t>((t + 1) * hidden)))
        << mc.name << " token " << t;
  }
}

TEST_P(moe_ffn_test, shards_of_whole_experts_sum_to_the_whole_layer) {
  const moe_case& mc = GetParam();
  const moe_config c = config_of(mc);
  std::mt19937 rng(23);
  const gpu::moe_weights_f32 w = random_weights(c, rng);
  const size_t rows = 29, n = rows * hidden, num_experts = static_cast<size_t>(c.num_experts);
  const auto x = random_vector(rng, n, 1.0f);
  gpu::thread_pool pool(2);
  gpu::cpu::moe_ffn ffn(c, static_cast<int64_t>(hidden));
  std::vector<float> whole(n);
  std::vector<int64_t> whole_routed(num_experts, 0);
  ffn.forward(pool, w, x.data(), rows, whole.data(), whole_routed.data());
  for (size_t shards : {size_t(2), size_t(3)}) {
    std::vector<float> sum(n, 0.0f), part(n);
    for (size_t s = 0; s < shards; ++s) {
      // Shard s: experts [s*E/N, (s+1)*E/N) whole; the shared experts on shard 0 (the model splits
      // their columns instead, which shard_plan_test covers).
      gpu::moe_weights_f32 mine;
      mine.router = w.router;
      const size_t first = s * num_experts / shards, end = (s + 1) * num_experts / shards;
      mine.first_expert = static_cast<int64_t>(first);
      for (size_t e = first; e < end; ++e) mine.experts.push_back(w.experts[e]);
      if (s == 0) mine.shared = w.shared;
      std::vector<int64_t> routed(num_experts, 0);
      gpu::cpu::moe_ffn own(c, static_cast<int64_t>(hidden));
      own.forward(pool, mine, x.data(), rows, part.data(), routed.data());
      EXPECT_EQ(routed, whole_routed) << mc.name << " shard " << s << ": every shard counts every routed token";
      for (size_t i = 0; i < n; ++i) sum[i] += part[i];
    }
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; ++i) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(sum[i]) - whole[i]));
      max_ref = std::max(max_ref, std::abs(static_cast<double>(whole[i])));
    }
    EXPECT_LT(max_diff / max_ref, 1e-6) << mc.name << " over " << shards << " shards";
  }
}

INSTANTIATE_TEST_SUITE_P(routers, moe_ffn_test,
                         ::testing::Values(moe_case{"mixtral_like", 8, 2, 0, true, 1.0},
                                           moe_case{"qwen3_moe_unnormalised", 16, 4, 0, false, 1.0},
                                           moe_case{"deepseek_like_shared_and_scaled", 6, 2, 2, false, 2.5},
                                           moe_case{"every_expert", 4, 4, 1, true, 1.0}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace actorserve::testing
