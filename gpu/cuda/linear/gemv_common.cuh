#pragma once
// Device pieces shared by the GEMV kernels (gemv_kernel.cu, gemv_bulk_kernel.cu,
// fp8_linear_kernel.cu, fp8_gemv_bulk_kernel.cu, fp8_gemv_fused_kernel.cu): the streamed weight
// loads, the per-warp partial sums and their fixed reduction order, the main loop and the QKV
// projection's rope + KV-write epilogue. Every kernel built from them computes a weight row's dot
// product in the same order, so their fp32 outputs agree bit for bit.
#include <cstdint>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/ops/rope_kv.cuh"

namespace actorserve::gpu::cuda::dev::gemv {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kLoadsInFlight = 8;  // 16-byte weight loads per thread per round

/// A streamed 16-byte load: not kept in L1, prefetching 256 bytes into L2.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// Programmatic dependent launch (sm_90, see launch_pdl): let the next kernel start launching;
/// wait until the previous one has finished and its writes are visible.
__device__ __forceinline__ void launch_dependents() { pdl_launch_dependents(); }
__device__ __forceinline__ void wait_for_previous_grid() { pdl_wait(); }

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

/// Per-warp partial sums of the block's kRows weight rows against M activation rows.
template <int M, int kRows>
struct partials {
  float v[kWarps][kRows * M];
  /// The dot product of weight row r with activation row i (after a __syncthreads).
  __device__ __forceinline__ float total(int r, int i) const {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) s += v[q][r * M + i];
    return s;
  }
};

/// Stores each warp's sums of `acc` (one per weight row and activation row) into `red`.
template <int M, int kRows>
__device__ __forceinline__ void reduce_warps(const float (&acc)[kRows][M], partials<M, kRows>& red) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x % kThreads) >> 5;  // within a 128-thread (sub-)block
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) red.v[warp][r * M + i] = v;
    }
}

/// acc[r] += w_r[c] . x[c] over the 8 elements of chunk c, in element order.
template <class T, int kRows>
__device__ __forceinline__ void fma_chunk(const uint4 (&wv)[kRows], const uint4& xv, float (&acc)[kRows][1]) {
  float wf[kRows][8], xf[8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) unpack8<T>(wv[r], wf[r]);
  unpack8<T>(xv, xf);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][0] = fmaf(wf[r][e], xf[e], acc[r][0]);
}

/// Nothing to do once the previous grid has finished.
struct no_hook {
  __device__ __forceinline__ void operator()() const {}
};

/// No scale inside the dot product: each weight row's sum is scaled (or not) after the loop.
struct unscaled_chunks {
  static constexpr bool kScaled = false;
  __device__ __forceinline__ float of(int, int) const { return 1.0f; }
};

/// Weights stored as T (bf16/fp16): 8 per 16-byte load. A weight format gives the values per
/// load and how a load unpacks to floats in memory order (fp8_linear_kernel.cu has E4M3's).
template <class T>
struct same_as_activations {
  static constexpr int kPerLoad = 8;
  __device__ __forceinline__ static void unpack(const uint4& raw, float* out) { unpack8<T>(raw, out); }
};

/// acc plus the dot product of one load's kN weights `wf` with activations `xf`: each product
/// joins acc in element order, or (kScaled) the products' fp32 sum from 0 joins acc times `sc`.
template <int kN, bool kScaled>
__device__ __forceinline__ float dot_load(const float* wf, const float* xf, float sc, float acc) {
  if constexpr (kScaled) {
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kN; ++e) part = fmaf(wf[e], xf[e], part);
    return fmaf(part, sc, acc);
  } else {
#pragma unroll
    for (int e = 0; e < kN; ++e) acc = fmaf(wf[e], xf[e], acc);
    return acc;
  }
}

/// The GEMV's main loop: the dot products of the weight rows `wp` (in format W) with the m (<= M)
/// rows of x, reduced per warp into `red`; ends with a __syncthreads, after the previous grid
/// finished. `after_wait` runs once per thread right after the wait for the previous grid (to
/// start loads of what that grid wrote early). `scales` (S::kScaled) multiplies each load's fp32
/// partial sum of weight row r, chunk c by scales.of(r, c) before it joins the row's sum (the
/// block scales of block-scaled FP8 weights); unscaled, each product joins the sum directly.
template <class T, int M, int kRows, class Hook = no_hook, class W = same_as_activations<T>,
          class S = unscaled_chunks>
__device__ __forceinline__ void accumulate(const T* x, int m, int k, const uint4* const (&wp)[kRows],
                                           partials<M, kRows>& red, Hook after_wait = {}, S scales = {}) {
  constexpr int kUnroll = kLoadsInFlight / kRows;
  constexpr int kXLoads = W::kPerLoad / 8;  // 16-byte activation loads per weight load
  const int chunks = k / W::kPerLoad, x_loads = k / 8;
  const uint4* xp = reinterpret_cast<const uint4*>(x);
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;

  // The weights never depend on earlier kernels: the first loads go out before waiting for them.
  launch_dependents();
  bool waited = false;
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kThreads * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[u][r] = c < chunks ? load_stream(wp[r] + c) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) {
      wait_for_previous_grid();
      after_wait();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
      float wf[kRows][W::kPerLoad], sc[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        W::unpack(wv[u][r], wf[r]);
        sc[r] = scales.of(r, c);
      }
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[W::kPerLoad];
        const uint4* xr = xp + size_t(i) * x_loads + size_t(c) * kXLoads;
#pragma unroll
        for (int j = 0; j < kXLoads; ++j) unpack8<T>(__ldg(xr + j), xf + 8 * j);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][i] = dot_load<W::kPerLoad, S::kScaled>(wf[r], xf, sc[r], acc[r][i]);
      }
    }
  }
  if (!waited) {  // threads without a chunk; outputs may still be read by the previous kernel
    wait_for_previous_grid();
    after_wait();
  }
  reduce_warps<M, kRows>(acc, red);
  __syncthreads();
}

/// The QKV projection's epilogue for the rotary pair (c0, c0 + D/2) of head h, column i < D/2,
/// whose projections are g1 and g2 (one thread): what rope_kv_write does for that pair, with its
/// maths (ops/rope_kv.cuh), into a 16-bit or (a.kv_fp8) FP8 E4M3 cache.
template <class T>
__device__ __forceinline__ void qkv_rope_store(const rope_kv_args& a, int h, int i, float g1, float g2) {
  const int D = a.head_dim, half = D / 2, H = a.num_heads, KVH = a.num_kv_heads;
  const int c0 = h * D + i, c1 = c0 + half;
  float x1 = g1, x2 = g2;
  if (a.bias) {
    x1 += a.bias[c0];
    x2 += a.bias[c1];
  }
  const int slot = a.slots[0];
  const size_t kvd = size_t(KVH) * D;
  if (h < H + KVH) {
    const float2 y = rope_rotate(x1, x2, rope_cos_sin(a.positions[0], a.inv_freq[i], a.attention_factor));
    if (h < H) {
      a.qkv[c0] = y.x;
      a.qkv[c1] = y.y;
      return;
    }
    a.qkv[c0] = g1;  // k as the projection left it, as rope_kv_write does
    a.qkv[c1] = g2;
    if (slot < 0) return;
    const size_t at = size_t(slot) * kvd + size_t(h - H) * D + i;
    store_kv<T>(a.k_cache, at, y.x, a.kv_fp8, a.k_scale);
    store_kv<T>(a.k_cache, at + half, y.y, a.kv_fp8, a.k_scale);
    return;
  }
  a.qkv[c0] = g1;
  a.qkv[c1] = g2;
  if (slot < 0) return;
  const size_t at = size_t(slot) * kvd + size_t(h - H - KVH) * D + i;
  store_kv<T>(a.v_cache, at, x1, a.kv_fp8, a.v_scale);
  store_kv<T>(a.v_cache, at + half, x2, a.kv_fp8, a.v_scale);
}

}  // namespace actorserve::gpu::cuda::dev::gemv
