#pragma once
// Pieces the decode kernels share: masking the keys past a piece's end, the final merge of the
// warps' online-softmax states, which writes the output or a split piece's partial, and the merge
// of a split (sequence, KV head)'s pieces by the CTA that finishes its last piece.
#include <cmath>

#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda::attn_dev {

/// Programmatic dependent launch, start of a decode kernel: lets the next kernel (launched with
/// the PDL attribute) begin its own prologue; a no-op when nothing depends programmatically.
__device__ __forceinline__ void allow_dependents() { dev::pdl_launch_dependents(); }

/// Waits until the previous kernel (this step's rope_kv_write: Q and the newest K/V row) has
/// finished and its writes are visible; returns at once when not launched as a dependent.
__device__ __forceinline__ void wait_for_previous_kernel() { dev::pdl_wait(); }

/// Whether the rows [k0, min(k0 + n, kv_end)) of a decode piece precede its sequence's newest
/// key (context_len - 1, written by this step's rope_kv_write) and were cached before this step
/// (attn_launch::older_keys_cached), so may be copied before wait_for_previous_kernel(). The
/// step's metadata (counts, items, sequences, block tables) is copied from the host before the
/// step's first kernel and is always safe to read.
__device__ __forceinline__ bool rows_precede_newest(const attn_launch& a, int k0, int n, int kv_end, int context_len) {
  return a.older_keys_cached && min(kv_end, k0 + n) < context_len;
}

/// Merges the NW warps' states of the same 16 rows (each warp saw different keys) through
/// `red` (shared memory, at least NW * 16 * (D + 4) + NW * 32 floats) and stores rows < valid:
/// the output when it.partial < 0, else the normalised partial and its log2-sum-exp.
template <class T, int D, int NW, class W>
__device__ __forceinline__ void merge_warps_and_store(const attn_launch& a, const attn_item& it, W& w,
                                                      float* red, int valid, int tid) {
  constexpr int kStride = D + 4;
  const int lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  if constexpr (W::merges_in_registers)
    if (it.partial < 0) return w.template merge_and_store<NW>(a, it, red, valid, tid);
  float* o_s = red;
  float* ml_s = red + NW * 16 * kStride;
  w.store_state(o_s + warp * 16 * kStride, ml_s + warp * 16 * 2, kStride, valid, lane);
  __syncthreads();
  for (int idx = tid; idx < valid * (D / 4); idx += NW * 32) {
    const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
    float M = -INFINITY;
#pragma unroll
    for (int v = 0; v < NW; ++v) M = fmaxf(M, ml_s[(v * 16 + r) * 2]);
    float L = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (M != -INFINITY) {
#pragma unroll
      for (int v = 0; v < NW; ++v) {
        const float mv = ml_s[(v * 16 + r) * 2];
        if (mv == -INFINITY) continue;
        const float f = exp2f(mv - M);
        L += ml_s[(v * 16 + r) * 2 + 1] * f;
        const float4 x = *reinterpret_cast<const float4*>(o_s + (v * 16 + r) * kStride + c);
        acc.x += x.x * f;
        acc.y += x.y * f;
        acc.z += x.z * f;
        acc.w += x.w * f;
      }
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
    if (it.partial < 0) {
      const int tok = it.q_begin + r / G, head = it.kv_head * G + r % G;
      T* out = static_cast<T*>(a.out) + size_t(tok) * a.num_heads * D + head * D + c;
      uint2 v;
      v.x = elem<T>::pack(acc.x, acc.y);
      v.y = elem<T>::pack(acc.z, acc.w);
      *reinterpret_cast<uint2*>(out) = v;
    } else {
      const size_t row = size_t(it.partial) * tc_partial_rows + r;
      *reinterpret_cast<float4*>(a.partial_o + row * D + c) = acc;
      if (c == 0) a.partial_lse[row * 2] = L > 0.0f ? M + log2f(L) : -INFINITY;
    }
  }
}

/// Log2-sum-exp of piece `s`, row `r` of combine `cb` (L2: written by other CTAs of this grid).
__device__ __forceinline__ float piece_lse(const attn_launch& a, const attn_combine& cb, int s, int r) {
  return __ldcg(a.partial_lse + (size_t(cb.first_partial + s) * tc_partial_rows + r) * 2);
}

/// Reads the pieces' log2-sum-exp values into sm[s * rows + r], then turns them in place into
/// the merge's weights 2^(lse_s - M_r) / sum_s 2^(lse_s - M_r), once per (piece, row): one warp
/// per row, its lanes over the pieces (a piece that saw no key, and every piece of a row that
/// none did, weighs 0). Ends with the CTA synchronised.
template <int NT>
__device__ __forceinline__ void piece_weights(const attn_launch& a, const attn_combine& cb, int rows, float* sm,
                                              int tid) {
  constexpr int kLoads = 4;  // issued together, then stored
  const int S = cb.num_splits, n = rows * S, lane = tid & 31;
  for (int i0 = 0; i0 < n; i0 += kLoads * NT) {
    float v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int idx = i0 + tid + k * NT;
      v[k] = idx < n ? piece_lse(a, cb, idx / rows, idx % rows) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k)
      if (i0 + tid + k * NT < n) sm[i0 + tid + k * NT] = v[k];
  }
  __syncthreads();
  for (int r = tid >> 5; r < rows; r += NT / 32) {
    float M = -INFINITY, W = 0.0f;
    for (int s = lane; s < S; s += 32) M = fmaxf(M, sm[s * rows + r]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (M != -INFINITY)
      for (int s = lane; s < S; s += 32) W += exp2f(sm[s * rows + r] - M);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) W += __shfl_xor_sync(0xffffffffu, W, o);
    const float inv = W > 0.0f ? 1.0f / W : 0.0f;
    for (int s = lane; s < S; s += 32) {
      const float ls = sm[s * rows + r];
      sm[s * rows + r] = ls == -INFINITY || M == -INFINITY ? 0.0f : exp2f(ls - M) * inv;
    }
  }
  __syncthreads();
}

/// The weighted sum of the pieces' partial rows (weights in sm, piece_weights), read from L2
/// with 32 loads in flight per thread: kK (row, 4-column) chunks a thread (tid + k * NT) times
/// 32 / kK pieces a step, so 32 pieces take one step at 32/8 heads and two at 64/8.
template <class T, int D, int NT, int kK>
__device__ __forceinline__ void sum_pieces(const attn_launch& a, const attn_combine& cb, int rows, const float* sm,
                                           int tid) {
  constexpr int kP = 32 / kK;
  const int G = a.num_heads / a.num_kv_heads, S = cb.num_splits, chunks = rows * (D / 4);
  int r[kK], c[kK];
  float4 acc[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    const int idx = min(tid + k * NT, chunks - 1);  // a thread past the end repeats the last chunk
    r[k] = idx / (D / 4);
    c[k] = (idx % (D / 4)) * 4;
    acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int s0 = 0; s0 < S; s0 += kP) {
    float4 x[kK][kP];
#pragma unroll
    for (int k = 0; k < kK; ++k)
#pragma unroll
      for (int j = 0; j < kP; ++j)
        x[k][j] = s0 + j < S ? __ldcg(reinterpret_cast<const float4*>(
                                   a.partial_o + (size_t(cb.first_partial + s0 + j) * tc_partial_rows + r[k]) * D + c[k]))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kK; ++k)
#pragma unroll
      for (int j = 0; j < kP; ++j) {
        const float f = s0 + j < S ? sm[(s0 + j) * rows + r[k]] : 0.0f;
        acc[k].x += x[k][j].x * f;
        acc[k].y += x[k][j].y * f;
        acc[k].z += x[k][j].z * f;
        acc[k].w += x[k][j].w * f;
      }
  }
#pragma unroll
  for (int k = 0; k < kK; ++k)
    if (tid + k * NT < chunks) store_merged_chunk<T>(a, cb, G, D, r[k], c[k], acc[k], 1.0f);
}

/// out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M) over the pieces of combine `cb`, by the
/// whole CTA (NT threads): the weights once per (piece, row) in `sm` (cap floats of shared
/// memory), then the weighted sum. Used by the last piece's CTA (finish_split) and by the
/// separate merge kernel (combine_kernel.cu).
template <class T, int D, int NT>
__device__ __forceinline__ void merge_pieces(const attn_launch& a, const attn_combine& cb, float* sm, int cap, int tid) {
  const int rows = cb.q_len * (a.num_heads / a.num_kv_heads);
  if (rows * cb.num_splits > cap || rows * (D / 4) > 2 * NT) __trap();  // the backend keeps max_merge_rows, max_split_pieces
  piece_weights<NT>(a, cb, rows, sm, tid);
  if (rows * (D / 4) <= NT)
    sum_pieces<T, D, NT, 1>(a, cb, rows, sm, tid);
  else
    sum_pieces<T, D, NT, 2>(a, cb, rows, sm, tid);
}

/// Called by every CTA after it stored a split piece's partial (it.partial >= 0): counts the
/// finished pieces of combine it.pad; the CTA that finishes the last one merges all pieces,
/// out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), and resets the counter for the next
/// call. `sm` (cap floats of shared memory, free once the piece is stored) holds the weights.
template <class T, int D, int NT>
__device__ __forceinline__ void finish_split(const attn_launch& a, const attn_item& it, float* sm, int cap, int tid) {
  const attn_combine cb = a.combines[it.pad];
  if (!dev::counted_last(a.split_counters + it.pad, cb.num_splits)) return;
  merge_pieces<T, D, NT>(a, cb, sm, cap, tid);
}

}  // namespace actorserve::gpu::cuda::attn_dev
