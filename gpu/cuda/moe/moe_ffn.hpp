#pragma once
/// A sparse layer's FFN on the device: router logits (one GEMM), the router, the permutation, the
/// grouped gate/up GEMM with SiLU-and-mul (or, at one token, the expert GEMV), the grouped down
/// GEMM and the weighted combine into the residual stream (docs/moe.md). No host round trip: a
/// decode step that runs it is capturable.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "config/error.hpp"
#include "config/moe_config.hpp"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

class gemm_runner;

/// One sparse layer's weights on the device, in the activation dtype.
struct device_experts {
  void* router = nullptr;    ///< [E][hidden]
  void* gate_up = nullptr;   ///< [E][2 * inter][hidden]: each expert's gate rows, then its up rows
  void* down = nullptr;      ///< [E][hidden][inter]
  /// DeepSeek-V2's shared experts as one dense SwiGLU MLP of shared_inter = n_shared_experts x
  /// the experts' intermediate size, added after the routed sum; null without them.
  void* shared_gate_up = nullptr;   ///< [2 * shared_inter][hidden], gate rows first
  void* shared_down = nullptr;      ///< [hidden][shared_inter]
};

class moe_ffn {
 public:
  using alloc_fn = std::function<status(size_t bytes, void** out)>;

  /// Sizes the buffers for up to `max_tokens` tokens a step through `alloc` (whose memory the
  /// caller owns and frees).
  status init(const moe_config& cfg, int hidden, act_dtype dt, int max_tokens, const alloc_fn& alloc);

  /// out[t] (+)= the experts' weighted sum for each of `rows` tokens of x ([rows][hidden] of dt):
  /// added into out when `accumulate` (the residual), else written (a delta added later). Rows
  /// that `gemm` gives its GEMV (one token) take expert_gemv with SiLU-and-mul fused over the
  /// (token, slot) pairs, then moe_down_combine; more take the permutation and the grouped GEMM.
  /// One such token also takes the router GEMV and the routing in one launch (moe_route_gemv).
  status run(gemm_runner& gemm, const device_experts& w, const void* x, int rows, float* out, bool accumulate,
             cudaStream_t s);

 private:
  act_dtype dt_ = act_dtype::bf16;
  int hidden_ = 0, inter_ = 0, num_experts_ = 0, top_k_ = 0;
  int num_groups_ = 1, topk_groups_ = 1;   ///< group_limited_greedy's limits; 1, 1 for greedy
  bool sigmoid_ = false, renormalize_ = false;
  float scaling_ = 1.0f;
  float* logits_ = nullptr;           ///< [tokens][E]
  int32_t* route_counter_ = nullptr;  ///< moe_route_gemv's count of finished blocks (0 between launches)
  int32_t* experts_ = nullptr;        ///< [tokens][top_k]
  float* weights_ = nullptr;          ///< [tokens][top_k]
  int32_t* offsets_ = nullptr;        ///< [E + 1]
  int32_t* tile_offsets_ = nullptr;   ///< [E + 1]
  int32_t* sorted_pairs_ = nullptr;   ///< [tokens * top_k]
  int32_t* pair_rows_ = nullptr;      ///< [tokens * top_k]
  void* act_ = nullptr;               ///< [tokens * top_k][inter] of dt
  float* y_ = nullptr;                ///< [tokens * top_k][hidden]
};

}  // namespace actorserve::gpu::cuda
