#pragma once
/// The fp32 mixture-of-experts FFN of a sparse layer: router logits, top-k (moe_router), the
/// step's tokens grouped per expert (expert_permutation), each expert's SwiGLU MLP over its rows,
/// the weighted sum back per token, plus the shared experts where the model has them. Only the
/// experts the weights hold compute: an expert-parallel shard's output is its experts' share of
/// the sum, every token routed elsewhere contributing nothing.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/moe_config.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/expert_permutation.hpp"
#include "gpu/model/model_weights.hpp"
#include "gpu/model/moe_router.hpp"

namespace actorserve::gpu::cpu {

class moe_ffn {
 public:
  moe_ffn(const moe_config& cfg, int64_t hidden_size);

  /// out[t] = MoE(x[t]) for `rows` rows of hidden_size floats (`out` is overwritten), over the
  /// experts `w` holds. Each row's result depends on that row alone, whatever else the step
  /// carries. With `routed` (num_experts counters), adds the rows the router sent each expert,
  /// held or not (the router is replicated, so every shard counts the same).
  void forward(thread_pool& pool, const moe_weights_f32& w, const float* x, size_t rows, float* out,
               int64_t* routed = nullptr);

 private:
  moe_router router_;
  size_t hidden_, inter_, top_k_, num_experts_;
  // Scratch, reused across layers and steps.
  std::vector<float> logits_;        ///< [rows][num_experts]
  std::vector<int32_t> experts_;     ///< [rows][top_k]
  std::vector<float> weights_;       ///< [rows][top_k]
  expert_permutation perm_;
  std::vector<float> xp_, yp_;       ///< [held rows][hidden]: gathered inputs, expert outputs
  std::vector<float> gate_, up_;     ///< [held rows][intermediate]
  std::vector<float> shared_;        ///< [rows][hidden]
};

}  // namespace actorserve::gpu::cpu
