// The kernels of DeepSeek-V2's up-projected prefill attention (mla_kernels.hpp): the cached
// latents and rope keys gathered into contiguous rows, and the causal softmax over the score rows.
#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kGatherThreads = 128;

/// Grid context of kGatherThreads: one key each.
template <class T>
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(mla_gather_args a) {
  pdl_begin();
  const int j = blockIdx.x, r = a.rank, dr = a.rope_dim, W = r + dr, H = a.num_heads, qk = a.nope_dim + dr;
  const size_t slot = size_t(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size;
  const T* src = static_cast<const T*>(a.cache) + slot * W;
  T* lat = static_cast<T*>(a.latents) + size_t(j) * r;
  for (int i = threadIdx.x; i < r; i += blockDim.x) lat[i] = src[i];
  T* k = static_cast<T*>(a.k) + size_t(j) * H * qk + a.nope_dim;
  for (int i = threadIdx.x; i < H * dr; i += blockDim.x) k[size_t(i / dr) * qk + i % dr] = src[r + i % dr];
}

constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxHeld = 16;  ///< scores a thread holds in registers: rows of up to 4,096 keys are read once

/// The block's maximum; `scratch` holds 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? scratch[threadIdx.x & 31] : -INFINITY;
  return warp_max(v);
}

/// Grid (rows, H) of kSoftmaxThreads: one row of one head each. A row of up to
/// kSoftmaxThreads x kSoftmaxHeld keys is read once into registers; a longer one three times.
template <class T>
__global__ void __launch_bounds__(kSoftmaxThreads) causal_softmax_kernel(mla_softmax_args a) {
  __shared__ float scratch[32];
  pdl_begin();
  const int i = blockIdx.x, h = blockIdx.y;
  const size_t row = (size_t(h) * a.rows + i) * a.ld;
  const float* s = a.scores + row;
  T* p = static_cast<T*>(a.probs) + row;
  const int valid = min(a.keys, a.first_position + i + 1);
  if (a.keys <= kSoftmaxThreads * kSoftmaxHeld) {
    float v[kSoftmaxHeld];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kSoftmaxHeld; ++k) {
      const int j = threadIdx.x + k * kSoftmaxThreads;
      v[k] = j < valid ? s[j] * a.scale : -INFINITY;
      mx = fmaxf(mx, v[k]);
    }
    mx = block_max(mx, scratch);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kSoftmaxHeld; ++k) {
      v[k] = expf(v[k] - mx);  // exp(-inf) = 0 past the causal bound
      sum += v[k];
    }
    const float inv = 1.0f / block_sum(sum, scratch);
#pragma unroll
    for (int k = 0; k < kSoftmaxHeld; ++k) {
      const int j = threadIdx.x + k * kSoftmaxThreads;
      if (j < a.keys) p[j] = from_f32<T>(v[k] * inv);
    }
    return;
  }
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, s[j] * a.scale);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(s[j] * a.scale - mx);
  const float inv = 1.0f / block_sum(sum, scratch);
  for (int j = threadIdx.x; j < a.keys; j += blockDim.x)
    p[j] = from_f32<T>(j < valid ? expf(s[j] * a.scale - mx) * inv : 0.0f);
}

}  // namespace

int mla_gather_latents(act_dtype dt, const mla_gather_args& a, cudaStream_t s) {
  if (a.context == 0) return 0;
  AS_DISPATCH_ACT(dt, return int(launch_pdl(gather_kernel<T>, dim3(a.context), dim3(kGatherThreads), s, a)));
}

int mla_causal_softmax(act_dtype dt, const mla_softmax_args& a, cudaStream_t s) {
  if (a.rows == 0 || a.num_heads == 0) return 0;
  if (a.keys > a.ld || a.first_position + a.rows > a.keys) return int(cudaErrorInvalidValue);
  AS_DISPATCH_ACT(dt, return int(launch_pdl(causal_softmax_kernel<T>, dim3(a.rows, a.num_heads),
                                            dim3(kSoftmaxThreads), s, a)));
}

}  // namespace actorserve::gpu::cuda
