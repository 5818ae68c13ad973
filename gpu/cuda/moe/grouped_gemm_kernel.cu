// The grouped expert GEMM (moe_kernels.hpp): one CTA per (tile of an expert's rows, block of
// output columns), 16-bit operands on tensor cores through WMMA (mma.sync), fp32 accumulation.
#include <mma.h>

#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
namespace wmma = nvcuda::wmma;

constexpr int BM = moe_tile_rows, BN = 64, BK = 32;
constexpr int kThreads = 128;          ///< 4 warps as 2 x 2, each 32 x 32 of the tile
constexpr int kLda = BK + 8;           ///< padded rows of the 16-bit tiles (16-byte multiples)
constexpr int kLdc = BN + 4;           ///< padded rows of the fp32 output tile

/// Grid (ceil(N / BN), moe_max_tiles). Out: float, or T for an output a SiLU kernel reads.
template <class T, class Out>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(grouped_gemm_args a) {
  __shared__ __align__(32) T As[BM * kLda];
  __shared__ __align__(32) T Bs[BN * kLda];
  __shared__ __align__(32) float Cs[BM * kLdc];
  __shared__ int32_t a_row[BM];
  pdl_begin();
  const int tile = blockIdx.y, E = a.num_experts;
  if (tile >= a.tile_offsets[E]) return;  // past the step's last tile
  int lo = 0, hi = E - 1;                 // the expert: the last e with tile_offsets[e] <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.tile_offsets[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int e = lo;
  const int m0 = a.offsets[e] + (tile - a.tile_offsets[e]) * BM;
  const int rows = min(BM, a.offsets[e + 1] - m0);
  const int n0 = blockIdx.x * BN, N = a.n, K = a.k;
  for (int r = threadIdx.x; r < BM; r += kThreads)
    a_row[r] = r < rows ? (a.a_rows ? a.a_rows[m0 + r] / a.a_rows_div : m0 + r) : -1;
  __syncthreads();
  const T* A = static_cast<const T*>(a.a);
  const T* W = static_cast<const T*>(a.w) + size_t(e) * N * K;
  const int warp = threadIdx.x >> 5, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int k0 = 0; k0 < K; k0 += BK) {
    // 16-byte chunks: BM x BK / 8 of A and BN x BK / 8 of B, zero past the rows, columns or K.
    for (int c = threadIdx.x; c < BM * (BK / 8); c += kThreads) {
      const int r = c / (BK / 8), kk = (c % (BK / 8)) * 8;
      const int src = a_row[r];
      *reinterpret_cast<uint4*>(&As[r * kLda + kk]) =
          src >= 0 && k0 + kk < K ? *reinterpret_cast<const uint4*>(A + size_t(src) * K + k0 + kk) : zero;
    }
    for (int c = threadIdx.x; c < BN * (BK / 8); c += kThreads) {
      const int r = c / (BK / 8), kk = (c % (BK / 8)) * 8;
      *reinterpret_cast<uint4*>(&Bs[r * kLda + kk]) =
          n0 + r < N && k0 + kk < K ? *reinterpret_cast<const uint4*>(W + size_t(n0 + r) * K + k0 + kk) : zero;
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < BK; ks += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &As[(wm + 16 * i) * kLda + ks], kLda);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &Bs[(wn + 16 * j) * kLda + ks], kLda);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&Cs[(wm + 16 * i) * kLdc + wn + 16 * j], acc[i][j], kLdc, wmma::mem_row_major);
  __syncthreads();
  Out* Y = static_cast<Out*>(a.y);
  for (int c = threadIdx.x; c < BM * BN; c += kThreads) {
    const int r = c / BN, col = c % BN;
    if (r < rows && n0 + col < N) store_out(&Y[size_t(m0 + r) * N + n0 + col], Cs[r * kLdc + col]);
  }
}

}  // namespace

int grouped_gemm(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const dim3 grid((a.n + BN - 1) / BN, moe_max_tiles(a.num_pairs, a.num_experts));
  cudaError_t e = cudaSuccess;
  if (a.y_act)
    AS_DISPATCH_ACT(dt, e = launch_pdl(grouped_gemm_kernel<T, T>, grid, dim3(kThreads), s, a));
  else
    AS_DISPATCH_ACT(dt, e = launch_pdl(grouped_gemm_kernel<T, float>, grid, dim3(kThreads), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
