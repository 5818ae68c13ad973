#include "gpu/model/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "config/check.hpp"
#include "gpu/model/softmax.hpp"

namespace actorserve::gpu {
namespace {

/// Ranks index a before b: higher value first, the lower index on a tie.
struct ranks_before {
  const float* value;
  bool operator()(int32_t a, int32_t b) const { return value[a] > value[b] || (value[a] == value[b] && a < b); }
};

void softmax(const float* x, size_t n, float* out) {
  const float inv = exp_shifted(x, n, out);
  for (size_t i = 0; i < n; ++i) out[i] *= inv;
}

void sigmoid(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

}  // namespace

moe_router::moe_router(const moe_config& cfg)
    : num_experts_(cfg.num_experts),
      top_k_(cfg.top_k),
      scoring_(cfg.scoring),
      method_(cfg.topk_method),
      num_groups_(cfg.topk_method == moe_topk_method::group_limited_greedy ? cfg.num_groups : 1),
      topk_groups_(cfg.topk_method == moe_topk_method::group_limited_greedy ? cfg.topk_groups : 1),
      renormalize_(cfg.renormalize),
      scaling_(static_cast<float>(cfg.routed_scaling_factor)) {
  AS_CHECK(num_experts_ > 0 && top_k_ > 0 && top_k_ <= num_experts_, "router: top_k must be in [1, num_experts]");
  AS_CHECK(num_groups_ > 0 && num_experts_ % num_groups_ == 0 && topk_groups_ > 0 && topk_groups_ <= num_groups_ &&
               top_k_ <= topk_groups_ * (num_experts_ / num_groups_),
           "router: group limits leave fewer than top_k experts");
}

void moe_router::route(const float* logits, size_t num_tokens, int32_t* experts, float* weights) const {
  scratch sc;
  sc.scores.resize(static_cast<size_t>(num_experts_));
  sc.order.resize(static_cast<size_t>(num_experts_));
  sc.group_scores.resize(static_cast<size_t>(num_groups_));
  sc.group_order.resize(static_cast<size_t>(num_groups_));
  const size_t e = static_cast<size_t>(num_experts_), k = static_cast<size_t>(top_k_);
  for (size_t t = 0; t < num_tokens; ++t) route_one(logits + t * e, sc, experts + t * k, weights + t * k);
}

void moe_router::route_one(const float* logits, scratch& sc, int32_t* experts, float* weights) const {
  const size_t n = static_cast<size_t>(num_experts_), k = static_cast<size_t>(top_k_);
  float* scores = sc.scores.data();
  int32_t* order = sc.order.data();
  if (scoring_ == moe_scoring::softmax)
    softmax(logits, n, scores);
  else
    sigmoid(logits, n, scores);
  // The candidates: every expert, or the experts of the best groups, in ascending index order.
  size_t num_candidates = n;
  std::iota(order, order + n, 0);
  if (method_ == moe_topk_method::group_limited_greedy) {
    const size_t groups = static_cast<size_t>(num_groups_), per_group = n / groups;
    const auto kept = static_cast<std::ptrdiff_t>(topk_groups_);
    for (size_t g = 0; g < groups; ++g)
      sc.group_scores[g] = *std::max_element(scores + g * per_group, scores + (g + 1) * per_group);
    std::iota(sc.group_order.begin(), sc.group_order.end(), 0);
    std::partial_sort(sc.group_order.begin(), sc.group_order.begin() + kept, sc.group_order.end(),
                      ranks_before{sc.group_scores.data()});
    std::sort(sc.group_order.begin(), sc.group_order.begin() + kept);
    num_candidates = 0;
    for (std::ptrdiff_t i = 0; i < kept; ++i)
      for (size_t j = 0; j < per_group; ++j)
        order[num_candidates++] = static_cast<int32_t>(static_cast<size_t>(sc.group_order[i]) * per_group + j);
  }
  std::partial_sort(order, order + k, order + num_candidates, ranks_before{scores});
  float sum = 0.0f;
  for (size_t j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = scores[order[j]];
    sum += weights[j];
  }
  for (size_t j = 0; j < k; ++j) {
    if (renormalize_) weights[j] /= sum;
    weights[j] *= scaling_;
  }
}

}  // namespace actorserve::gpu
