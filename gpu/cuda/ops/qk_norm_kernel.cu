// Qwen3's per-head RMSNorm of q and k (qk_norm.hpp).
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/ops/qk_norm.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  ///< head_dim <= 32 * 8

/// Grid (tokens); one warp per head at a time, each lane holding up to 8 of its values.
__global__ void __launch_bounds__(kWarps * 32) qk_norm_kernel(qk_norm_args a) {
  pdl_begin();
  const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int D = a.head_dim, H = a.num_heads, KVH = a.num_kv_heads;
  const size_t width = size_t(H + 2 * KVH) * D;
  float* row = a.qkv + size_t(t) * width;
  for (int h = warp; h < H + KVH; h += kWarps) {
    float* head = row + size_t(h) * D;
    const float* bias = a.bias ? a.bias + size_t(h) * D : nullptr;
    const float* w = h < H ? a.q_weight : a.k_weight;
    float x[kMaxPerLane];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      x[j] = 0.0f;
      if (i < D) {
        x[j] = head[i] + (bias ? bias[i] : 0.0f);
        ss += x[j] * x[j];
      }
    }
    const float inv = rsqrtf(warp_sum(ss) / float(D) + a.eps);
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < D) head[i] = w[i] * (x[j] * inv);
    }
  }
  if (!a.bias) return;
  const size_t v0 = size_t(H + KVH) * D;
  for (size_t i = v0 + threadIdx.x; i < width; i += blockDim.x) row[i] += a.bias[i];
}

}  // namespace

int qk_rmsnorm(const qk_norm_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.head_dim <= 0 || a.head_dim > 32 * kMaxPerLane) return int(cudaErrorInvalidValue);
  return int(launch_pdl(qk_norm_kernel, dim3(a.n), dim3(kWarps * 32), s, a));
}

}  // namespace actorserve::gpu::cuda
