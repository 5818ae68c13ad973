#pragma once
// One token's latent norm and cache write (mla_kernels.hpp's mla_latent_write) as a block's
// device function: mla_latent_write's kernel and the W_UK head GEMV's launch that carries it
// (head_gemv.cu) run the same code.
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/ops/rope_kv.cuh"

namespace actorserve::gpu::cuda::dev {

/// The block size latent_write_row is written for.
inline constexpr int mla_latent_row_threads = 256;

/// Token t's latent row by a block of mla_latent_row_threads (after the caller's pdl_begin): its
/// cos and sin computed once for the rope key and every head's q_pe.
template <class T>
__device__ __forceinline__ void latent_write_row(const mla_latent_args& a, int t) {
  __shared__ float scratch[32];
  __shared__ float cos_s[mla_max_rope_dim / 2], sin_s[mla_max_rope_dim / 2];
  const int r = a.rank, dr = a.rope_dim, half = dr / 2, W = r + dr;
  const int H = a.num_heads, qk = a.nope_dim + dr;
  const int pos = a.positions[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 cs = rope_cos_sin(pos, a.inv_freq[i], a.attention_factor);
    cos_s[i] = cs.x;
    sin_s[i] = cs.y;
  }
  const float* row = a.kv_a + size_t(t) * W;
  const auto in = [&](int i) { return row[i] + (a.kv_a_bias ? a.kv_a_bias[i] : 0.0f); };
  float ss = 0.0f;
  for (int i = threadIdx.x; i < r; i += blockDim.x) ss += in(i) * in(i);
  const float inv = rsqrtf(block_sum(ss, scratch) / float(r) + a.eps);  // block_sum synchronises: cos_s is set
  const int slot = a.slots[t];
  if (slot >= 0) {
    T* dst = static_cast<T*>(a.cache) + size_t(slot) * W;
    for (int i = threadIdx.x; i < r; i += blockDim.x) dst[i] = from_f32<T>(a.kv_a_norm[i] * (in(i) * inv));
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float2 k = rope_rotate(in(r + 2 * i), in(r + 2 * i + 1), make_float2(cos_s[i], sin_s[i]));
      dst[r + 2 * i] = from_f32<T>(k.x);
      dst[r + 2 * i + 1] = from_f32<T>(k.y);
    }
  }
  T* q = static_cast<T*>(a.q) + size_t(t) * H * qk;
  float* q_abs = a.q_abs + size_t(t) * H * W;
  const float* qf = a.q_f32 ? a.q_f32 + size_t(t) * a.q_f32_stride : nullptr;
  if (qf)  // q_nope, rounded as the projection's dt output is
    for (int idx = threadIdx.x; idx < H * a.nope_dim; idx += blockDim.x) {
      const size_t at = size_t(idx / a.nope_dim) * qk + idx % a.nope_dim;
      q[at] = from_f32<T>(qf[at]);
    }
  // q_pe's element j of head h, as the dt query holds it.
  const auto q_pe = [&](int h, int j) {
    const size_t at = size_t(h) * qk + a.nope_dim + j;
    return qf ? to_f32(from_f32<T>(qf[at])) : to_f32(q[at]);
  };
  for (int idx = threadIdx.x; idx < H * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    T* pe = q + size_t(h) * qk + a.nope_dim;
    const float2 x = rope_rotate(q_pe(h, 2 * i), q_pe(h, 2 * i + 1), make_float2(cos_s[i], sin_s[i]));
    float* dst = q_abs + size_t(h) * W + r;
    dst[2 * i] = x.x;
    dst[2 * i + 1] = x.y;
    pe[2 * i] = from_f32<T>(x.x);
    pe[2 * i + 1] = from_f32<T>(x.y);
  }
}


}  // namespace actorserve::gpu::cuda::dev
