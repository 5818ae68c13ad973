// Skinny GEMM (decode GEMV): one thread block per kRows weight rows, its threads striding along k
// in 16-byte chunks. Weight loads bypass L1 (each byte is read once); the activation rows, read
// by every block, stay in L1/L2. Per-thread partial sums are reduced in a fixed order, so results
// do not depend on scheduling, nor on how many rows a block holds. At m = 1 two fused kernels take
// the element-wise kernel that follows the projection into their epilogue (gemv_kernel.hpp).
#include <cstdint>

#include "gpu/cuda/linear/gemv_bulk.hpp"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;

/// kRows weight rows per block, M activation rows (m <= M).
template <class T, int M, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const T* x, int m, int k, const T* w, int n, float* y,
                                                         float beta) {
  __shared__ partials<M, kRows> red;
  const int row0 = blockIdx.x * kRows;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    wp[r] = reinterpret_cast<const uint4*>(w + size_t(min(row0 + r, n - 1)) * k);
  accumulate<T, M, kRows>(x, m, k, wp, red);
  for (int t = threadIdx.x; t < kRows * M; t += kThreads) {
    const int r = t / M, i = t % M, row = row0 + r;
    if (i >= m || row >= n) continue;
    const float v = red.total(r, i);
    float* dst = y + size_t(i) * n + row;
    *dst = beta == 0.0f ? v : v + beta * *dst;
  }
}

/// QKV projection of one token with rope and the KV write: each block computes the rotary pair
/// (c0, c0 + D/2) of one head, so the epilogue of rope_kv_write runs on the block's own outputs.
template <class T>
__global__ void __launch_bounds__(kThreads) gemv_qkv_rope_kernel(const T* x, int k, const T* w, rope_kv_args a) {
  __shared__ partials<1, 2> red;
  const int D = a.head_dim, half = D / 2;
  const int h = blockIdx.x / half, i = blockIdx.x % half;
  const int c0 = h * D + i, c1 = c0 + half;
  const uint4* const wp[2] = {reinterpret_cast<const uint4*>(w + size_t(c0) * k),
                              reinterpret_cast<const uint4*>(w + size_t(c1) * k)};
  accumulate<T, 1, 2>(x, 1, k, wp, red);
  if (threadIdx.x == 0) qkv_rope_store<T>(a, h, i, red.total(0, 0), red.total(1, 0));
}

/// Gate/up projection of one token with SiLU-and-mul: each block computes kPairs gate rows and
/// the matching up rows and writes act[j] = silu(gate_j) * up_j.
template <class T, int kPairs>
__global__ void __launch_bounds__(kThreads) gemv_gate_up_silu_kernel(const T* x, int k, const T* w, int inter,
                                                                      T* act) {
  __shared__ partials<1, 2 * kPairs> red;
  const int j0 = blockIdx.x * kPairs;
  const uint4* wp[2 * kPairs];
#pragma unroll
  for (int r = 0; r < kPairs; ++r) {
    const int j = min(j0 + r, inter - 1);
    wp[r] = reinterpret_cast<const uint4*>(w + size_t(j) * k);
    wp[kPairs + r] = reinterpret_cast<const uint4*>(w + size_t(inter + j) * k);
  }
  accumulate<T, 1, 2 * kPairs>(x, 1, k, wp, red);
  const int r = threadIdx.x;
  if (r >= kPairs || j0 + r >= inter) return;
  const float g = red.total(r, 0), u = red.total(kPairs + r, 0);
  act[j0 + r] = silu_mul<T>(g, u);
}

template <class T, int M, int R>
void launch_rows(const T* x, int m, int k, const T* w, int n, float* y, float beta, cudaStream_t s) {
  dev::launch_pdl(gemv_kernel<T, M, R>, dim3((n + R - 1) / R), dim3(kThreads), s, x, m, k, w, n, y, beta);
}

template <class T>
void launch(const T* x, int m, int k, const T* w, int n, float* y, float beta, int rows, cudaStream_t s) {
  if (m <= 2) {  // few accumulators: fewer rows per block buy more blocks (a shorter tail)
    if (m == 1) {
      if (rows == 1) return launch_rows<T, 1, 1>(x, m, k, w, n, y, beta, s);
      if (rows == 2) return launch_rows<T, 1, 2>(x, m, k, w, n, y, beta, s);
      return launch_rows<T, 1, 4>(x, m, k, w, n, y, beta, s);
    }
    if (rows == 1) return launch_rows<T, 2, 1>(x, m, k, w, n, y, beta, s);
    if (rows == 2) return launch_rows<T, 2, 2>(x, m, k, w, n, y, beta, s);
    return launch_rows<T, 2, 4>(x, m, k, w, n, y, beta, s);
  }
  if (m <= 4) return launch_rows<T, 4, 4>(x, m, k, w, n, y, beta, s);
  launch_rows<T, 8, 4>(x, m, k, w, n, y, beta, s);
}

}  // namespace

bool gemv_supported(const void* x, int m, int k, const void* w) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return m >= 1 && m <= gemv_max_m && k > 0 && k % 8 == 0 && aligned(x) && aligned(w);
}

int gemv(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta, cudaStream_t s,
         int rows_per_block, const bulk_gemv_tuning& bulk) {
  if (n <= 0) return 0;
  // The bulk-copy kernels only where the GPU and the loaded code run them (tuning.hpp, runs_tma).
  if (m == 1 && beta == 0.0f && bulk.plain && runs_tma(loaded_gpu_target())) return gemv_bulk(dt, x, k, w, n, y, s, bulk);
  AS_DISPATCH_ACT(dt, launch<T>(static_cast<const T*>(x), m, k, static_cast<const T*>(w), n, y, beta,
                                rows_per_block, s));
  return cudaGetLastError();
}

int gemv_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s,
                  const bulk_gemv_tuning& bulk) {
  if (bulk.qkv && runs_tma(loaded_gpu_target())) return gemv_bulk_qkv_rope(dt, x, k, w, a, s, bulk);
  const int blocks = (a.num_heads + 2 * a.num_kv_heads) * (a.head_dim / 2);
  AS_DISPATCH_ACT(dt, launch_pdl(gemv_qkv_rope_kernel<T>, dim3(blocks), dim3(kThreads), s, static_cast<const T*>(x),
                                 k, static_cast<const T*>(w), a));
  return cudaGetLastError();
}

int gemv_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act, int rows_per_block,
                      cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (bulk.gate_up && runs_tma(loaded_gpu_target())) return gemv_bulk_gate_up_silu(dt, x, k, w, inter, act, rows_per_block, s, bulk);
  if (rows_per_block == 2)
    AS_DISPATCH_ACT(dt, launch_pdl(gemv_gate_up_silu_kernel<T, 1>, dim3(inter), dim3(kThreads), s,
                                   static_cast<const T*>(x), k, static_cast<const T*>(w), inter, static_cast<T*>(act)));
  else
    AS_DISPATCH_ACT(dt, launch_pdl(gemv_gate_up_silu_kernel<T, 2>, dim3((inter + 1) / 2), dim3(kThreads), s,
                                   static_cast<const T*>(x), k, static_cast<const T*>(w), inter, static_cast<T*>(act)));
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
