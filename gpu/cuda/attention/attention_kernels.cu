// Paged causal attention (prefill chunks and decode), with or without a sliding window: one thread
// block per work item (a tile of up to attn_tile_rows query rows = tokens x heads of one KV group,
// over a key range), online softmax over chunks of 32 keys staged in shared memory as fp32,
// optional split-KV partials merged by a second kernel.
#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kChunk = generic_key_chunk;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = attn_tile_rows;

size_t attention_smem_bytes(int D) {
  const int Dp = D + 4;
  return sizeof(float) * (size_t(2) * kRows * D + size_t(kChunk) * Dp + size_t(kChunk) * D + kRows * kChunk + 2 * kRows);
}

template <class T>
__global__ void __launch_bounds__(kThreads) attention_kernel(attn_launch a) {
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const attn_item it = a.items[blockIdx.x];
  const attn_seq sq = a.seqs[it.seq];
  const int D = a.head_dim, Dp = D + 4, G = a.num_heads / a.num_kv_heads;
  const int rows = it.q_len * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* q_s = smem;
  float* acc_s = q_s + kRows * D;
  float* k_s = acc_s + kRows * D;
  float* v_s = k_s + kChunk * Dp;
  float* p_s = v_s + kChunk * D;
  float* m_s = p_s + kRows * kChunk;
  float* l_s = m_s + kRows;
  const float qscale = a.scale * 1.4426950408889634f;  // scores in log2 units
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int tok = it.q_begin + r / G, head = it.kv_head * G + r % G;
    q_s[idx] = a.q[size_t(tok) * a.q_stride + head * D + d] * qscale;
    acc_s[idx] = 0.0f;
  }
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    m_s[r] = -INFINITY;
    l_s[r] = 0.0f;
  }
  const int ctx_before = sq.context_len - sq.q_len;
  const int32_t* bt = a.block_tables + sq.bt_offset;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int KVH = a.num_kv_heads, bs = a.block_size, nvec = D / 8;
  for (int k0 = it.kv_begin; k0 < it.kv_end; k0 += kChunk) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kChunk * nvec; idx += kThreads) {
      const int j = idx / nvec, c = (idx % nvec) * 8;
      const int kpos = k0 + j;
      float kv[8], vv[8];
      if (kpos < it.kv_end) {
        const size_t off = ((size_t(bt[kpos / bs]) * bs + kpos % bs) * KVH + it.kv_head) * D + c;
        load8(kc + off, kv);
        load8(vc + off, vv);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kv[e] = vv[e] = 0.0f;
      }
      *reinterpret_cast<float4*>(k_s + j * Dp + c) = make_float4(kv[0], kv[1], kv[2], kv[3]);
      *reinterpret_cast<float4*>(k_s + j * Dp + c + 4) = make_float4(kv[4], kv[5], kv[6], kv[7]);
      *reinterpret_cast<float4*>(v_s + j * D + c) = make_float4(vv[0], vv[1], vv[2], vv[3]);
      *reinterpret_cast<float4*>(v_s + j * D + c + 4) = make_float4(vv[4], vv[5], vv[6], vv[7]);
    }
    __syncthreads();
    const int nkeys = min(kChunk, it.kv_end - k0);
    for (int r = warp; r < rows; r += kWarps) {
      const int qpos = ctx_before + (it.q_begin + r / G - sq.q_start);
      const int kpos = k0 + lane;
      float sc = -INFINITY;
      if (lane < nkeys && kpos <= qpos && kpos >= window_first_key(qpos, a.window)) {
        const float4* qv = reinterpret_cast<const float4*>(q_s + r * D);
        const float4* kv = reinterpret_cast<const float4*>(k_s + lane * Dp);
        float dot = 0.0f;
        for (int d = 0; d < D / 4; ++d) {
          const float4 x = qv[d], y = kv[d];
          dot += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
        }
        sc = dot;
      }
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(sc));
      if (m_new == -INFINITY) continue;  // every key of this chunk is masked for this row
      const float p = sc == -INFINITY ? 0.0f : exp2f(sc - m_new);
      const float corr = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
      const float psum = warp_sum(p);
      p_s[r * kChunk + lane] = p;
      __syncwarp();
      for (int d = lane; d < D; d += 32) {
        float acc = acc_s[r * D + d] * corr;
        for (int j = 0; j < nkeys; ++j) acc += p_s[r * kChunk + j] * v_s[j * D + d];
        acc_s[r * D + d] = acc;
      }
      __syncwarp();
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * corr + psum;
      }
      __syncwarp();
    }
  }
  __syncthreads();
  if (it.partial < 0) {
    T* out = static_cast<T*>(a.out);
    for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
      const int r = idx / D, d = idx % D;
      const int tok = it.q_begin + r / G, head = it.kv_head * G + r % G;
      const float l = l_s[r];
      out[size_t(tok) * a.num_heads * D + head * D + d] = from_f32<T>(l > 0.0f ? acc_s[idx] / l : 0.0f);
    }
  } else {
    float* pa = a.partial_o + size_t(it.partial) * kRows * D;
    float* pml = a.partial_lse + size_t(it.partial) * kRows * 2;
    for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) pa[idx] = acc_s[idx];
    for (int r = threadIdx.x; r < rows; r += kThreads) {
      pml[2 * r] = m_s[r];
      pml[2 * r + 1] = l_s[r];
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(attn_launch a) {
  if (int(blockIdx.x) >= a.counts[1]) return;
  const attn_combine cb = a.combines[blockIdx.x];
  const int D = a.head_dim, G = a.num_heads / a.num_kv_heads;
  const int rows = cb.q_len * G;
  T* out = static_cast<T*>(a.out);
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float m = -INFINITY;
    for (int s = 0; s < cb.num_splits; ++s) m = fmaxf(m, a.partial_lse[(size_t(cb.first_partial + s) * kRows + r) * 2]);
    float l = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
      for (int s = 0; s < cb.num_splits; ++s) {
        const size_t slot = size_t(cb.first_partial + s) * kRows + r;
        const float ms = a.partial_lse[slot * 2];
        if (ms == -INFINITY) continue;
        const float w = exp2f(ms - m);
        l += a.partial_lse[slot * 2 + 1] * w;
        acc += a.partial_o[slot * D + d] * w;
      }
    }
    const int tok = cb.q_begin + r / G, head = cb.kv_head * G + r % G;
    out[size_t(tok) * a.num_heads * D + head * D + d] = from_f32<T>(l > 0.0f ? acc / l : 0.0f);
  }
}

template <class T>
int launch_attention(const attn_launch& a, cudaStream_t s) {
  const size_t smem = attention_smem_bytes(a.head_dim);
  static bool configured = false;  // the attribute is per function, set once
  if (!configured) {
    if (auto e = cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(attention_smem_bytes(256)));
        e != cudaSuccess)
      return e;
    configured = true;
  }
  if (a.prefill_grid > 0) attention_kernel<T><<<a.prefill_grid, kThreads, smem, s>>>(a);
  if (a.combine_grid > 0) combine_kernel<T><<<a.combine_grid, kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

int paged_attention(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.head_dim % 8 != 0 || a.head_dim > 256) return cudaErrorInvalidValue;
  if (dt == act_dtype::bf16) return launch_attention<__nv_bfloat16>(a, s);
  return launch_attention<__half>(a, s);
}

}  // namespace actorserve::gpu::cuda
