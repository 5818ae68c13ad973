#pragma once
// One row's residual add + RMSNorm held in registers, shared by add_rmsnorm's one-block-a-row
// kernel (elementwise_kernels.cu) and the one-token MoE router that runs the post-attention norm
// itself (moe/norm_router_kernel.cu): both compute the row in the same order, so their outputs
// agree bit for bit.
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda::dev {

/// Values of one row a thread keeps in registers: the row fits when hidden <= kNormPerThread x
/// the block's threads.
inline constexpr int kNormPerThread = 8;

/// res += del (+ bias) when del is not null, then store(k, rmsnorm(res)[k] * weight[k] as T) for
/// every k < hidden, by the whole block (hidden <= kNormPerThread * blockDim.x): every load is
/// issued before the first store, the values stay in registers, and the squares are summed by
/// block_sum in thread order. `scratch` holds 32 floats; the caller has waited for the previous
/// grid.
template <class T, class Store>
__device__ __forceinline__ void add_rmsnorm_row(float* res, const float* del, const float* bias, const float* weight,
                                                float eps, int hidden, float* scratch, Store store) {
  float v[kNormPerThread], w[kNormPerThread];
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    v[j] = 0.0f;
    w[j] = 0.0f;
    if (k < hidden) {
      v[j] = res[k];
      if (del) v[j] += del[k] + (bias ? bias[k] : 0.0f);
      w[j] = weight[k];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (k >= hidden) break;
    if (del) res[k] = v[j];
    ss += v[j] * v[j];
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(hidden) + eps);
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int k = threadIdx.x + j * blockDim.x;
    if (k < hidden) store(k, from_f32<T>(w[j] * (v[j] * rstd)));
  }
}

}  // namespace actorserve::gpu::cuda::dev
