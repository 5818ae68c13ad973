#pragma once
/// A mixture-of-experts router's maths (pure, shared by the executors and tested directly): from
/// one token's router logits to its top-k experts and their weights, as transformers' routers of
/// Mixtral, Qwen3-MoE and DeepSeek-V2 compute them, in fp32:
///
///   scores  = softmax(logits) | sigmoid(logits)                               (moe_config::scoring)
///   greedy:               the top_k highest scores
///   group_limited_greedy: experts in num_groups consecutive groups; a group's score is its best
///                         expert's; the topk_groups best groups are kept and the top_k highest
///                         scores among their experts chosen
///   weights = chosen scores, divided by their sum when renormalize, times routed_scaling_factor
///
/// Tie rule (deterministic): of two equal scores the lower expert index ranks first, of two equal
/// group scores the lower group index. The chosen experts are listed by descending score (ties by
/// ascending index), as torch.topk(sorted=True) lists them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/moe_config.hpp"

namespace actorserve::gpu {

class moe_router {
 public:
  /// `cfg` is a validated moe_config (load_model_config checks top_k and the group limits).
  explicit moe_router(const moe_config& cfg);

  int64_t num_experts() const { return num_experts_; }
  int64_t top_k() const { return top_k_; }

  /// Routes `num_tokens` tokens: `logits` is [num_tokens][num_experts]; writes `experts` and
  /// `weights`, each [num_tokens][top_k]. Safe to call from several threads at once.
  void route(const float* logits, size_t num_tokens, int32_t* experts, float* weights) const;

 private:
  struct scratch {
    std::vector<float> scores, group_scores;
    std::vector<int32_t> order, group_order;
  };
  void route_one(const float* logits, scratch& sc, int32_t* experts, float* weights) const;

  int64_t num_experts_, top_k_;
  moe_scoring scoring_;
  moe_topk_method method_;
  int64_t num_groups_, topk_groups_;
  bool renormalize_;
  float scaling_;
};

}  // namespace actorserve::gpu
