// The grouped expert GEMM (moe_kernels.hpp): one CTA per (tile of an expert's rows, block of BN
// output columns). A kStages-deep cp.async pipeline streams BK-wide K slices of the tile's A rows
// and the expert's weight rows into XOR-swizzled shared memory while mma.sync (m16n8k16, 16-bit
// operands, fp32 accumulation) consumes the oldest slice: the weights are read at streaming
// bandwidth instead of one synchronous load per slice.
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using attn_dev::cp_async16;
using attn_dev::cp_async_commit;
using attn_dev::cp_async_wait;
using attn_dev::elem;
using attn_dev::ldsm_x4;
using attn_dev::smem_addr;
using attn_dev::swz;

// BM rows fit decode batches (a few hundred tokens x top-8 over 128 experts: ~30 rows an expert);
// the wide BN makes each CTA stream 128 weight rows.
constexpr int BM = moe_tile_rows, BN = 128, BK = 64, kStages = 4;
constexpr int kThreads = 128;                    ///< 4 warps side by side along N
constexpr int kWarpN = BN / (kThreads / 32);     ///< each warp: BM rows x 32 columns
constexpr int kMt = BM / 16, kNt = kWarpN / 8;   ///< m16 and n8 mma tiles of a warp
constexpr int kChunks = BK / 8;                  ///< 16-byte chunks of a slice row
constexpr int kABytes = BM * BK * 2, kStageBytes = kABytes + BN * BK * 2;
constexpr int kSmem = kStages * kStageBytes;     ///< 80 KB: two CTAs an SM
static_assert(BK == 64, "swz<BK> swizzles rows of 8 chunks");
static_assert(BM % 16 == 0 && kNt % 2 == 0, "whole mma tiles, B loaded 16 columns at a time");
static_assert((BM * kChunks) % kThreads == 0 && (BN * kChunks) % kThreads == 0, "whole copy rounds");

/// Grid (moe_max_tiles, ceil(N / BN), or ceil(N / (BN / 2)) with kSilu): the tiles of one expert
/// (same weights) are neighbours in launch order, so a second tile of an expert mostly finds its
/// weight slices in L2. Out: float, or T. kSilu (Out = T): the CTA's B rows are gate rows
/// [j0, j0 + BN / 2) and the matching up rows N + j0 + ..., each warp 16 of each, so that a
/// thread holds gate and up of the same outputs and writes SiLU(gate) * up.
template <class T, class Out, bool kSilu>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(grouped_gemm_args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int32_t a_row[BM];
  __shared__ int s_e, s_m0, s_rows;
  pdl_begin();
  const int tile = blockIdx.x, E = a.num_experts;
  if (tile >= a.tile_offsets[E]) return;  // past the step's last tile
  // The expert: the one e with tile_offsets[e] <= tile < tile_offsets[e + 1] (an empty expert has
  // no such tile), found by all threads at once in one round of loads, not a chain of them.
  for (int e = threadIdx.x; e < E; e += kThreads) {
    const int t0 = a.tile_offsets[e], t1 = a.tile_offsets[e + 1];
    if (t0 <= tile && tile < t1) {
      const int m0 = a.offsets[e] + (tile - t0) * BM;
      s_e = e;
      s_m0 = m0;
      s_rows = min(BM, a.offsets[e + 1] - m0);
    }
  }
  __syncthreads();
  const int e = s_e, m0 = s_m0, rows = s_rows;
  constexpr int kHalf = BN / 2;
  const int n0 = blockIdx.y * (kSilu ? kHalf : BN), N = a.n, K = a.k;
  for (int r = threadIdx.x; r < BM; r += kThreads)
    a_row[r] = r < rows ? (a.a_rows ? a.a_rows[m0 + r] / a.a_rows_div : m0 + r) : -1;
  __syncthreads();
  const T* A = static_cast<const T*>(a.a);
  const T* W = static_cast<const T*>(a.w) + size_t(e) * (kSilu ? 2 : 1) * N * K;
  const uint32_t s0 = smem_addr(smem);
  // Slice [k0, k0 + BK) into stage `st`; chunks past the rows, columns or K are zero-filled
  // (K % 8 == 0: a chunk is wholly in or out).
  const auto load = [&](int st, int k0) {
    const uint32_t as = s0 + st * kStageBytes, bs = as + kABytes;
#pragma unroll
    for (int i = 0; i < BM * kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / kChunks, ch = c % kChunks, k = k0 + ch * 8;
      const int src = a_row[r];
      const bool ok = src >= 0 && k < K;
      cp_async16(as + swz<BK>(r, ch), ok ? A + size_t(src) * K + k : A, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < BN * kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / kChunks, ch = c % kChunks, k = k0 + ch * 8;
      // B row r: weight row n0 + r, or with kSilu gate row n0 + r % kHalf / its up row.
      const int col = kSilu ? n0 + r % kHalf : n0 + r, wrow = kSilu && r >= kHalf ? N + col : col;
      const bool ok = col < N && k < K;
      cp_async16(bs + swz<BK>(r, ch), ok ? W + size_t(wrow) * K + k : W, ok ? 16 : 0);
    }
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wn = warp * kWarpN;
  float acc[kMt][kNt][4] = {};
  const int nk = (K + BK - 1) / BK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {  // fill the pipeline; empty groups keep the count
    if (st < nk) load(st, st * BK);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    // Slice kt has landed for this thread; the barrier makes it everyone's and tells that all
    // warps are done with slice kt - 1, whose stage the next load overwrites.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < nk) load((kt + kStages - 1) % kStages, (kt + kStages - 1) * BK);
    cp_async_commit();
    const uint32_t as = s0 + (kt % kStages) * kStageBytes, bs = as + kABytes;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[kMt][4];
#pragma unroll
      for (int i = 0; i < kMt; ++i)
        ldsm_x4(as + swz<BK>(16 * i + (lane & 15), ks * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
#pragma unroll
      for (int nb = 0; nb < kNt / 2; ++nb) {  // B rows b + [0, 16): two n8 tiles
        // kSilu: nb 0 the warp's 16 gate rows, nb 1 the matching up rows.
        const int b = kSilu ? nb * kHalf + warp * 16 : wn + nb * 16;
        uint32_t b0, b1, b2, b3;
        ldsm_x4(bs + swz<BK>(b + (lane >> 4) * 8 + (lane & 7), ks * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
        for (int i = 0; i < kMt; ++i) {
          elem<T>::mma(acc[i][2 * nb], af[i], b0, b1);
          elem<T>::mma(acc[i][2 * nb + 1], af[i], b2, b3);
        }
      }
    }
  }
  cp_async_wait<0>();
  // The mma C layout: lane holds rows lane / 4 (+ 8), columns 2 (lane % 4) (+ 1) of each tile.
  Out* Y = static_cast<Out*>(a.y);
#pragma unroll
  for (int i = 0; i < kMt; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * i + (lane >> 2) + 8 * h;
      if (r >= rows) continue;
      Out* y = Y + size_t(m0 + r) * N;
      if constexpr (kSilu) {  // gate in n8 tiles 0, 1, up in 2, 3; each rounded to T as a stored gate_up
        static_assert(kNt == 4, "two gate and two up n8 tiles a warp");
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int col = n0 + warp * 16 + 8 * j + 2 * (lane & 3) + q;
            const float g = to_f32(from_f32<T>(acc[i][j][2 * h + q]));
            const float u = to_f32(from_f32<T>(acc[i][j + 2][2 * h + q]));
            if (col < N) y[col] = silu_mul<T>(g, u);
          }
      } else {
#pragma unroll
        for (int j = 0; j < kNt; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int col = n0 + wn + 8 * j + 2 * (lane & 3) + q;
            if (col < N) store_out(y + col, acc[i][j][2 * h + q]);
          }
      }
    }
}

template <class T, class Out, bool kSilu>
cudaError_t launch(const grouped_gemm_args& a, cudaStream_t s) {
  static const cudaError_t configured =
      cudaFuncSetAttribute(grouped_gemm_kernel<T, Out, kSilu>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (configured != cudaSuccess) return configured;
  const int cols = kSilu ? BN / 2 : BN;
  const dim3 grid(moe_max_tiles(a.num_pairs, a.num_experts), (a.n + cols - 1) / cols);
  return launch_pdl_smem(grouped_gemm_kernel<T, Out, kSilu>, grid, dim3(kThreads), size_t(kSmem), s, a);
}

}  // namespace

int grouped_gemm(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  cudaError_t e = cudaSuccess;
  if (a.silu_and_mul)
    AS_DISPATCH_ACT(dt, e = launch<T, T, true>(a, s));
  else if (a.y_act)
    AS_DISPATCH_ACT(dt, e = launch<T, T, false>(a, s));
  else
    AS_DISPATCH_ACT(dt, e = launch<T, float, false>(a, s));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
