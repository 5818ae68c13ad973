#pragma once
/// The mixture-of-experts settings of a sparse model, one struct for every family whose keys
/// config.json carries (Mixtral, Qwen3-MoE, DeepSeek-V2): how many experts, how a router turns its
/// logits into expert weights, and which decoder layers are sparse.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace actorserve {

/// How router logits become scores.
enum class moe_scoring { softmax, sigmoid };

/// How the top-k experts are picked from the scores.
enum class moe_topk_method {
  greedy,                 ///< the k best scores
  group_limited_greedy,   ///< the k best among the experts of the topk_groups best groups
};

struct moe_config {
  int64_t num_experts = 0;               ///< routed experts per sparse layer
  int64_t top_k = 0;                     ///< experts per token
  int64_t expert_intermediate_size = 0;  ///< of each routed expert (and each shared one)
  moe_scoring scoring = moe_scoring::softmax;
  moe_topk_method topk_method = moe_topk_method::greedy;
  int64_t num_groups = 1;                ///< group_limited_greedy: experts split into this many groups
  int64_t topk_groups = 1;               ///< group_limited_greedy: groups kept per token
  bool renormalize = false;              ///< divide the top-k scores by their sum
  double routed_scaling_factor = 1.0;    ///< multiplies the (renormalised) top-k scores
  int64_t num_shared_experts = 0;        ///< always-on experts: one MLP of num_shared_experts x expert_intermediate_size
  std::vector<bool> sparse_layers;       ///< per decoder layer: true for a MoE FFN

  bool is_sparse(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(sparse_layers.size()) && sparse_layers[static_cast<std::size_t>(layer)];
  }
  int64_t experts_per_group() const { return num_groups > 0 ? num_experts / num_groups : num_experts; }
};

/// Names as config.json spells them ("softmax", "group_limited_greedy", ...).
const char* to_string(moe_scoring s);
const char* to_string(moe_topk_method m);

}  // namespace actorserve
