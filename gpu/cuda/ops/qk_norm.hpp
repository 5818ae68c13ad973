#pragma once
/// Qwen3's RMSNorm over each head of q and k, between the QKV projection and rope.
/// The launcher is plain C++ (no device code); it returns the launch's cudaError_t as an int.
#include <cuda_runtime_api.h>

namespace actorserve::gpu::cuda {

struct qk_norm_args {
  float* qkv = nullptr;              ///< [n, (H + 2*KVH) * D] fp32: q, then k, then v; normalised in place
  const float* bias = nullptr;       ///< same layout, may be null: added to q, k and v first
  const float* q_weight = nullptr;   ///< [D]
  const float* k_weight = nullptr;   ///< [D]
  float eps = 1e-6f;
  int n = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
};

/// For each token: the QKV bias added (q_proj and friends carry it in HF, before the norm), then
/// every q head x becomes x * rsqrt(mean(x^2) + eps) * q_weight, every k head likewise with
/// k_weight, in fp32 as HF's Qwen3RMSNorm computes it. v only receives its bias. rope_kv_write
/// runs after it without a bias. head_dim must be at most 256 (cudaErrorInvalidValue otherwise).
int qk_rmsnorm(const qk_norm_args& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
