// The absorbed form's per-head products at decode-sized row counts (head_gemv.hpp): every head's
// weight block read once, by 16-byte loads, for all of the step's rows, fp32 accumulation.
#include <cstdint>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/head_gemv.hpp"
#include "gpu/cuda/mla/latent_write_row.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRows = mla_head_gemv_max_rows, kMaxK = mla_head_gemv_max_k;
/// The kn kernel's CTA: kColGroups threads side by side take 8 columns each (a 16-byte load of
/// a B row), kKGroups of them stacked take every kKGroups-th row of k: 64 columns a CTA, so that
/// V2's W_UK (16 heads x 512 columns) spreads over 128 CTAs, each thread's 4 loads of its 128
/// rows in flight together.
constexpr int kColGroups = 8, kKGroups = kThreads / kColGroups, kKnCols = kColGroups * 8;

/// Head h's rows of A as floats in a_s[row][0, k).
template <class T>
__device__ void stage_rows(const head_gemv_args& g, int h, float (*a_s)[kMaxK]) {
  const size_t base = size_t(h) * g.stride_a;
  for (int i = threadIdx.x; i < g.m * g.k; i += kThreads) {
    const int row = i / g.k, kk = i % g.k;
    const size_t at = base + size_t(row) * g.lda + kk;
    a_s[row][kk] = g.a_f32 ? to_f32(from_f32<T>(g.a_f32[at])) : to_f32(static_cast<const T*>(g.a)[at]);
  }
}

template <class T>
__device__ __forceinline__ void store(const head_gemv_args& g, int h, int row, int col, float v) {
  const size_t at = size_t(h) * g.stride_c + size_t(row) * g.ldc + col;
  if (g.c_f32)
    static_cast<float*>(g.c)[at] = v;
  else
    static_cast<T*>(g.c)[at] = from_f32<T>(v);
}

/// B_h [k][n]: grid (ceil(n / kKnCols), batch). Thread t takes columns c0 + 8 (t % kColGroups)
/// .. + 8 over the k rows t / kColGroups, + kKGroups, ...; the groups' sums meet in shared
/// memory, a row of A at a time.
template <class T>
__device__ __forceinline__ void head_gemv_kn_block(const head_gemv_args& g) {
  __shared__ float a_s[kRows][kMaxK];
  __shared__ float red_s[kKGroups][kKnCols];
  const int h = blockIdx.y, cg = threadIdx.x % kColGroups, kg = threadIdx.x / kColGroups;
  const int c = blockIdx.x * kKnCols + cg * 8;
  stage_rows<T>(g, h, a_s);
  __syncthreads();
  float acc[kRows][8] = {};
  if (c < g.n) {
    const T* b = static_cast<const T*>(g.b) + size_t(h) * g.stride_b + c;
#pragma unroll 4
    for (int kk = kg; kk < g.k; kk += kKGroups) {
      float w[8];
      load8(b + size_t(kk) * g.ldb, w);
#pragma unroll
      for (int row = 0; row < kRows; ++row) {
        if (row >= g.m) break;
        const float x = a_s[row][kk];
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[row][j] += x * w[j];
      }
    }
  }
  // Unrolled, so that acc stays in registers (the break is uniform: every thread sees g.m).
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
    if (row >= g.m) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) red_s[kg][cg * 8 + j] = acc[row][j];
    __syncthreads();
    const int col = blockIdx.x * kKnCols + threadIdx.x;
    if (threadIdx.x < kKnCols && col < g.n) {
      float v = 0.0f;
#pragma unroll 8
      for (int i = 0; i < kKGroups; ++i) v += red_s[i][threadIdx.x];
      store<T>(g, h, row, col, v);
    }
    __syncthreads();
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) head_gemv_kn_kernel(head_gemv_args g) {
  pdl_begin();
  head_gemv_kn_block<T>(g);
}

/// head_gemv_kn_kernel's grid with one more column of blocks: block (last, t) for t < la.n
/// writes token t's latent row (latent_write_row), the rest of that column has nothing to do.
template <class T>
__global__ void __launch_bounds__(kThreads) head_gemv_kn_latent_kernel(head_gemv_args g, mla_latent_args la) {
  pdl_begin();
  if (blockIdx.x + 1 < gridDim.x) {
    head_gemv_kn_block<T>(g);
  } else if (int(blockIdx.y) < la.n) {
    latent_write_row<T>(la, blockIdx.y);
  }
}
static_assert(kThreads == mla_latent_row_threads, "the latent rows' blocks are the GEMV's");

/// B_h [n][k]: grid (ceil(n / kWarps), batch). Warp w takes output column blockIdx.x kWarps + w,
/// its lanes 8 of the k values at a time, then a warp sum per row.
template <class T>
__global__ void __launch_bounds__(kThreads) head_gemv_nk_kernel(head_gemv_args g) {
  __shared__ float a_s[kRows][kMaxK];
  pdl_begin();
  const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = blockIdx.x * kWarps + warp;
  stage_rows<T>(g, h, a_s);
  __syncthreads();
  if (col >= g.n) return;
  const T* b = static_cast<const T*>(g.b) + size_t(h) * g.stride_b + size_t(col) * g.ldb;
  float acc[kRows] = {};
#pragma unroll 2
  for (int v = lane; v < g.k / 8; v += 32) {
    float w[8];
    load8(b + v * 8, w);
#pragma unroll
    for (int row = 0; row < kRows; ++row) {
      if (row >= g.m) break;
      const float* x = &a_s[row][v * 8];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[row] += x[j] * w[j];
    }
  }
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
    if (row >= g.m) break;
    const float v = warp_sum(acc[row]);
    if (lane == 0) store<T>(g, h, row, col, v);
  }
}

}  // namespace

bool mla_head_gemv_supported(const head_gemv_args& g) {
  const bool rows = g.m >= 1 && g.m <= kRows && g.batch >= 1 && g.n >= 1 && g.k >= 1 && g.k <= kMaxK;
  const bool aligned = g.ldb % 8 == 0 && g.stride_b % 8 == 0 && reinterpret_cast<uintptr_t>(g.b) % 16 == 0;
  const bool vectors = g.b_rows_are_n ? g.k % 8 == 0 : g.n % 8 == 0;
  return rows && aligned && vectors && (g.a || g.a_f32) && g.c;
}

int mla_head_gemv(act_dtype dt, const head_gemv_args& g, cudaStream_t s) {
  if (!mla_head_gemv_supported(g)) return int(cudaErrorInvalidValue);
  AS_DISPATCH_ACT(dt, {
    if (g.b_rows_are_n)
      return int(launch_pdl(head_gemv_nk_kernel<T>, dim3((g.n + kWarps - 1) / kWarps, g.batch), dim3(kThreads), s, g));
    return int(launch_pdl(head_gemv_kn_kernel<T>, dim3((g.n + kKnCols - 1) / kKnCols, g.batch), dim3(kThreads), s, g));
  });
}

int mla_head_gemv_latent_write(act_dtype dt, const head_gemv_args& g, const mla_latent_args& la, cudaStream_t s) {
  if (!mla_head_gemv_supported(g) || g.b_rows_are_n || la.n > g.batch || la.rope_dim % 2 != 0 ||
      la.rope_dim > mla_max_rope_dim)
    return int(cudaErrorInvalidValue);
  AS_DISPATCH_ACT(dt, return int(launch_pdl(head_gemv_kn_latent_kernel<T>,
                                            dim3((g.n + kKnCols - 1) / kKnCols + 1, g.batch), dim3(kThreads), s, g,
                                            la)));
}

}  // namespace actorserve::gpu::cuda
