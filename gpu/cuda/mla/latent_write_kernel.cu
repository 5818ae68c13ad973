// DeepSeek-V2's latent norm and the latent cache write (mla_kernels.hpp): kv_a_proj's latent part
// normalised, its rope part rotated with every head's q_pe, the row written to the paged latent
// cache; a query given in fp32 (the one-token GEMV's) is rounded to the activation dtype here. Every sum is in fp32; the cache and the outputs are the activation dtype.
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/ops/rope_kv.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kNormThreads = 256;

/// Grid n of kNormThreads: one row each.
template <class T>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float* x, const float* bias, const float* weight, float eps, int width, T* out) {
  __shared__ float scratch[32];
  pdl_begin();
  const float* row = x + size_t(blockIdx.x) * width;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = row[i] + (bias ? bias[i] : 0.0f);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = row[i] + (bias ? bias[i] : 0.0f);
    out[size_t(blockIdx.x) * width + i] = from_f32<T>(weight[i] * (v * inv));
  }
}

/// Grid n of kNormThreads: one token each. Its cos and sin are computed once for the rope key
/// and every head's q_pe.
template <class T>
__global__ void __launch_bounds__(kNormThreads) latent_write_kernel(mla_latent_args a) {
  __shared__ float scratch[32];
  __shared__ float cos_s[mla_max_rope_dim / 2], sin_s[mla_max_rope_dim / 2];
  pdl_begin();
  const int t = blockIdx.x, r = a.rank, dr = a.rope_dim, half = dr / 2, W = r + dr;
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

}  // namespace

int mla_rmsnorm(act_dtype dt, const float* x, const float* bias, const float* weight, float eps, int n, int width,
                void* out, cudaStream_t s) {
  if (n == 0) return 0;
  AS_DISPATCH_ACT(dt, return int(launch_pdl(rmsnorm_kernel<T>, dim3(n), dim3(kNormThreads), s, x, bias, weight, eps,
                                            width, static_cast<T*>(out))));
}

int mla_latent_write(act_dtype dt, const mla_latent_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.rope_dim % 2 != 0 || a.rope_dim > mla_max_rope_dim) return int(cudaErrorInvalidValue);
  AS_DISPATCH_ACT(dt, return int(launch_pdl(latent_write_kernel<T>, dim3(a.n), dim3(kNormThreads), s, a)));
}

}  // namespace actorserve::gpu::cuda
