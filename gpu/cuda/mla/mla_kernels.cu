// DeepSeek-V2's latent attention kernels (mla_kernels.hpp): the latent norm, rope and cache
// write, and the absorbed attention over the latent cache with its split merge. Every sum is in
// fp32; the cache and the outputs are the activation dtype.
#include <algorithm>
#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"

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
  const float pos = float(a.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float ang = pos * a.inv_freq[i];
    cos_s[i] = cosf(ang) * a.attention_factor;
    sin_s[i] = sinf(ang) * a.attention_factor;
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
      const float re = in(r + 2 * i), im = in(r + 2 * i + 1);
      dst[r + 2 * i] = from_f32<T>(re * cos_s[i] - im * sin_s[i]);
      dst[r + 2 * i + 1] = from_f32<T>(re * sin_s[i] + im * cos_s[i]);
    }
  }
  const T* q = static_cast<const T*>(a.q) + size_t(t) * H * qk;
  float* q_abs = a.q_abs + size_t(t) * H * W;
  for (int idx = threadIdx.x; idx < H * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    const T* pe = q + size_t(h) * qk + a.nope_dim;
    const float re = to_f32(pe[2 * i]), im = to_f32(pe[2 * i + 1]);
    float* dst = q_abs + size_t(h) * W + r;
    dst[2 * i] = re * cos_s[i] - im * sin_s[i];
    dst[2 * i + 1] = re * sin_s[i] + im * cos_s[i];
  }
}

constexpr int kHeads = 16;                  ///< heads per CTA
constexpr int kKeys = 32;                   ///< keys per tile
constexpr int kThreads = 256;               ///< kHeads x 16 threads: 16 per head over the latent
constexpr int kAcc = mla_max_rank / 16;     ///< latent values each thread accumulates

/// Dynamic shared memory: q [kHeads][W] fp32, keys [kKeys][W] of T, scores [kHeads][kKeys].
size_t attention_smem(int W) {
  return size_t(kHeads) * W * sizeof(float) + size_t(kKeys) * W * 2 + size_t(kHeads) * kKeys * sizeof(float);
}

/// Grid (n, ceil(H / kHeads), num_splits) of kThreads. Thread i owns head i / 16 of the CTA's and
/// the latent values d = i % 16 + 16 j.
template <class T>
__global__ void __launch_bounds__(kThreads) attention_kernel(latent_attention_args a) {
  extern __shared__ float smem[];
  __shared__ float m_s[kHeads], l_s[kHeads], alpha_s[kHeads];
  pdl_begin();
  const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z;
  const int r = a.rank, W = r + a.rope_dim, H = a.num_heads;
  const int g = threadIdx.x / 16, sub = threadIdx.x % 16, h = h0 + g;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* q_s = smem;                                                  // [kHeads][W]
  T* k_s = reinterpret_cast<T*>(q_s + size_t(kHeads) * W);            // [kKeys][W]
  float* s_s = reinterpret_cast<float*>(k_s + size_t(kKeys) * W);     // [kHeads][kKeys]
  const int seq = a.token_seqs[t];
  // This CTA's piece of the context: keys [kb, ke).
  int kb = 0, ke = 0;
  if (seq >= 0) {
    const int context = a.positions[t] + 1;
    const int piece = (context + a.num_splits - 1) / a.num_splits;
    kb = min(context, split * piece);
    ke = min(context, kb + piece);
  }
  for (int i = threadIdx.x; i < kHeads * W; i += kThreads) {
    const int hh = h0 + i / W;
    q_s[i] = hh < H && seq >= 0 ? a.q_abs[(size_t(t) * H + hh) * W + i % W] : 0.0f;
  }
  if (threadIdx.x < kHeads) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  float acc[kAcc];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) acc[j] = 0.0f;
  const int32_t* table = seq >= 0 ? a.block_tables + a.seqs[seq].bt_offset : nullptr;
  const T* cache = static_cast<const T*>(a.cache);
  const int vecs = W / 8;  // 16-byte pieces of one key row
  for (int k0 = kb; k0 < ke; k0 += kKeys) {
    __syncthreads();  // the previous tile's keys and probabilities are consumed
    const int nk = min(kKeys, ke - k0);
    for (int i = threadIdx.x; i < nk * vecs; i += kThreads) {
      const int j = i / vecs, v = i % vecs, key = k0 + j;
      const size_t slot = size_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
      reinterpret_cast<uint4*>(k_s + size_t(j) * W)[v] = reinterpret_cast<const uint4*>(cache + slot * W)[v];
    }
    __syncthreads();
    // Scores: each warp takes (head, key) pairs, its lanes split the W dimensions.
    for (int p = warp; p < kHeads * kKeys; p += kThreads / 32) {
      const int hh = p / kKeys, j = p % kKeys;
      float s = 0.0f;
      if (j < nk)
        for (int d = lane; d < W; d += 32) s += q_s[hh * W + d] * to_f32(k_s[size_t(j) * W + d]);
      s = warp_sum(s);
      if (lane == 0) s_s[hh * kKeys + j] = j < nk ? s * a.scale : -INFINITY;
    }
    __syncthreads();
    // Online softmax: one thread per head.
    if (threadIdx.x < kHeads) {
      float* s = s_s + threadIdx.x * kKeys;
      float mx = m_s[threadIdx.x];
      for (int j = 0; j < nk; ++j) mx = fmaxf(mx, s[j]);
      const float alpha = expf(m_s[threadIdx.x] - mx);  // exp(-inf) = 0 on the first tile
      float sum = 0.0f;
      for (int j = 0; j < kKeys; ++j) {
        const float e = j < nk ? expf(s[j] - mx) : 0.0f;
        s[j] = e;
        sum += e;
      }
      m_s[threadIdx.x] = mx;
      l_s[threadIdx.x] = l_s[threadIdx.x] * alpha + sum;
      alpha_s[threadIdx.x] = alpha;
    }
    __syncthreads();
    const float alpha = alpha_s[g];
    const float* pr = s_s + g * kKeys;
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] *= alpha;
    for (int key = 0; key < nk; ++key) {
      const float pk = pr[key];
      const T* kr = k_s + size_t(key) * W;
#pragma unroll
      for (int j = 0; j < kAcc; ++j) {
        const int d = sub + 16 * j;
        if (d < r) acc[j] += pk * to_f32(kr[d]);
      }
    }
  }
  __syncthreads();
  if (h >= H) return;
  const size_t row = size_t(t) * H + h;
  if (a.num_splits == 1) {
    const float l = l_s[g], inv = l > 0.0f ? 1.0f / l : 0.0f;  // a padding row has no keys: zeros
    T* out = static_cast<T*>(a.out) + row * r;
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      const int d = sub + 16 * j;
      if (d < r) out[d] = from_f32<T>(acc[j] * inv);
    }
    return;
  }
  const size_t prow = size_t(split) * a.n * H + row;
  float* po = a.partial_o + prow * r;
#pragma unroll
  for (int j = 0; j < kAcc; ++j) {
    const int d = sub + 16 * j;
    if (d < r) po[d] = acc[j];
  }
  if (sub == 0) {
    a.partial_ml[prow * 2] = m_s[g];
    a.partial_ml[prow * 2 + 1] = l_s[g];
  }
}

constexpr int kCombineThreads = 128;

/// Grid (n, H) of kCombineThreads: the splits of one (token, head) merged and normalised.
template <class T>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(latent_attention_args a) {
  pdl_begin();
  const int t = blockIdx.x, h = blockIdx.y, H = a.num_heads, r = a.rank;
  const size_t row = size_t(t) * H + h, stride = size_t(a.n) * H;
  float mx = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) mx = fmaxf(mx, a.partial_ml[(s * stride + row) * 2]);
  float l = 0.0f;
  for (int s = 0; s < a.num_splits; ++s) {
    const float ms = a.partial_ml[(s * stride + row) * 2];
    if (ms != -INFINITY) l += expf(ms - mx) * a.partial_ml[(s * stride + row) * 2 + 1];
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* out = static_cast<T*>(a.out) + row * r;
  for (int d = threadIdx.x; d < r; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      const float ms = a.partial_ml[(s * stride + row) * 2];
      if (ms != -INFINITY) o += expf(ms - mx) * a.partial_o[(s * stride + row) * r + d];
    }
    out[d] = from_f32<T>(o * inv);
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

int latent_attention(act_dtype dt, const latent_attention_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  const int W = a.rank + a.rope_dim;
  if (a.rank > mla_max_rank || a.rope_dim > mla_max_rope_dim || W % 8 != 0 || a.num_splits < 1 ||
      a.num_splits > mla_max_splits)
    return int(cudaErrorInvalidValue);
  const size_t smem = attention_smem(W);
  const dim3 grid(a.n, (a.num_heads + kHeads - 1) / kHeads, a.num_splits);
  AS_DISPATCH_ACT(dt, {
    // Once per dtype, for the widest latent: the attribute is never set inside a graph capture
    // after that.
    static const cudaError_t attr = cudaFuncSetAttribute(
        attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        int(attention_smem(mla_max_rank + mla_max_rope_dim)));
    if (attr != cudaSuccess) return int(attr);
    if (const cudaError_t e = launch_pdl_smem(attention_kernel<T>, grid, dim3(kThreads), smem, s, a); e != cudaSuccess)
      return int(e);
    if (a.num_splits > 1)
      return int(launch_pdl(combine_kernel<T>, dim3(a.n, a.num_heads), dim3(kCombineThreads), s, a));
    return 0;
  });
}

int mla_num_splits(int n, int num_heads, int num_sms, int max_partial_rows) {
  if (n <= 0) return 1;
  const int ctas = n * ((num_heads + kHeads - 1) / kHeads);
  int splits = (num_sms + ctas - 1) / ctas;
  splits = std::min(splits, mla_max_splits);
  splits = std::min(splits, max_partial_rows / n);
  return std::max(splits, 1);
}

}  // namespace actorserve::gpu::cuda
