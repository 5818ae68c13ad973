// The grouped expert GEMM (moe_kernels.hpp): one CTA per (tile of an expert's rows, block of BN
// output columns), one kernel template over the tile shape (moe_tile.hpp). A kStages-deep
// cp.async pipeline streams BK-wide K slices of the tile's A rows and the expert's weight rows
// into XOR-swizzled shared memory while the warps' ldmatrix + mma.sync (m16n8k16, 16-bit
// operands, fp32 accumulation) consume the oldest slice: the weights are read at streaming
// bandwidth instead of one synchronous load per slice. The decode tiles (m16, m32, m48) take at
// most 99 KB of shared memory, so that two or three CTAs share an SM on 9.x and every device
// runs them. E4M3 experts stream their codes (half the bytes) through the same pipeline; each
// slice is converted in shared memory to the 16-bit operand fp8_dequantize gives (e4m3 x scale
// rounded once) before the warps' ldmatrix reads it, so the products are the bits of the 16-bit
// kernel over dequantized weights.
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/linear/fp8_gemv.cuh"
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
using attn_dev::st_shared16;
using attn_dev::swz;

/// A tile shape: BM permuted rows x BN weight rows a CTA, in kWarpsM x kWarpsN warps of
/// BM / kWarpsM rows x BN / kWarpsN weight rows each; K in slices of BK through kStages stages.
/// In launch order, kGroupTiles consecutive tiles take every column block before the next ones
/// start (0: all tiles, column block by column block), so that the CTAs in flight share both
/// their A rows and their weight rows in L2. kPrefetch256: the weight slices' copies ask L2 for
/// the 256 bytes around each 16-byte chunk, so a weight row comes from DRAM 256 contiguous bytes
/// (two slices) at a time instead of 128, and its next slice is found in L2.
template <moe_gemm_tile kTile, int kBN, int kWarpsM_, int kWarpsN_, int kStages_, int kGroupTiles_,
          bool kPrefetch256_ = false>
struct tile_shape {
  static constexpr moe_gemm_tile tile = kTile;
  static constexpr int BM = moe_tile_rows(kTile), BN = kBN, BK = 64, kStages = kStages_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpM = BM / kWarpsM, kWarpN = BN / kWarpsN;  ///< one warp's rows and columns
  static constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;            ///< its m16 and n8 mma tiles
  static constexpr int kChunks = BK / 8;                               ///< 16-byte chunks of a slice row
  static constexpr int kABytes = BM * BK * 2, kStageBytes = kABytes + BN * BK * 2;
  static constexpr int kSmem = kStages * kStageBytes;
  static constexpr int kStaticSmem = BM * 4 + 128;  ///< a_row and the expert's fields, as ptxas lays them out
  static constexpr int kGroupTiles = kGroupTiles_;
  static constexpr bool kPrefetch256 = kPrefetch256_;
  static_assert(BK == 64, "swz<BK> swizzles rows of 8 chunks");
  static_assert(kWarpM % 16 == 0 && kNt % 4 == 0,
                "whole mma tiles; B loaded 16 columns at a time, half of them gate and half up with SiLU");
  static_assert((BM * kChunks) % kThreads == 0 && (BN * kChunks) % kThreads == 0, "whole copy rounds");
  static_assert(kSmem + kStaticSmem <= 227 * 1024, "the most shared memory a block takes (9.x)");
  static_assert(!is_decode_moe_tile(kTile) || kSmem + kStaticSmem <= 99 * 1024,
                "a decode tile runs on every device: 99 KB a block on 8.6 / 8.9");
};

// m32: 4 warps side by side along N (32 x 32 each), 80 KB: two CTAs an SM. Its launch order
// puts an expert's tiles side by side, so a second tile of an expert mostly finds its weight
// slices in L2 (decode batches: few tiles an expert).
using tile_m32 = tile_shape<moe_gemm_tile::m32, 128, 1, 4, 4, 0>;
// m16: 4 warps of 16 x 32 (one m16 mma tile each), 4 stages of 18 KB (72 KB, three CTAs an
// SM): half of m32's products and A rows for the same weight bytes where an expert has few rows,
// and a third CTA an SM whose slices stream while another starts (finds its expert, gathers its
// rows, waits for its first slice) or ends: down's K of 768 is 12 slices, so that start is a
// large part of a CTA. m48: 4 warps of 48 x 32 (three m16 tiles each), 4 stages of 22 KB (88 KB,
// two CTAs an SM): one tile for an expert of 33 to 48 rows, which m32 cuts into two whose second
// re-reads every weight for a few rows. Both in m32's launch order, with the weights fetched 256
// bytes a row at a time.
using tile_m16 = tile_shape<moe_gemm_tile::m16, 128, 1, 4, 4, 0, true>;
using tile_m48 = tile_shape<moe_gemm_tile::m48, 128, 1, 4, 4, 0, true>;
// m64: 2 x 4 warps of 32 x 64, 160 KB; m128: 2 x 4 warps of 64 x 64 (128 accumulators a
// thread), 192 KB; one CTA an SM each. Groups of 8 tiles: the CTAs in flight read about 8 tiles'
// A rows and 16 column blocks' weights instead of ~130 tiles' A rows.
using tile_m64 = tile_shape<moe_gemm_tile::m64, 256, 2, 4, 4, 8>;
using tile_m128 = tile_shape<moe_gemm_tile::m128, 256, 2, 4, 4, 8>;

/// Shared memory of shape S's kernel: kStages stages of A rows and weight rows (16-bit, or E4M3
/// bytes), and with E4M3 one slice of 16-bit weight rows converted from the current stage.
template <class S, bool kFp8>
struct smem_layout {
  static constexpr int kBBytes = S::BN * S::BK * (kFp8 ? 1 : 2);
  static constexpr int kStageBytes = S::kABytes + kBBytes;
  static constexpr int kConverted = S::kStages * kStageBytes;  ///< offset of the converted slice
  static constexpr int kBytes = kConverted + (kFp8 ? S::BN * S::BK * 2 : 0);
  static constexpr int kFp8Chunks = S::BK / 16;  ///< 16-byte chunks of an E4M3 slice row
  static_assert(kBytes <= S::kSmem, "E4M3 stages take no more than 16-bit ones");
  static_assert(!kFp8 || (S::BN * kFp8Chunks) % S::kThreads == 0, "whole copy rounds");
};

/// 1-D grid of moe_max_tiles x ceil(N / BN) CTAs (ceil(N / (BN / 2)) with kSilu), ordered as
/// tile_shape says. Out: float, or T. kSilu (Out = T): the CTA's B rows are gate rows
/// [n0, n0 + BN / 2) and the matching up rows N + n0 + ..., each warp kWarpN / 2 of each, so that
/// a thread holds gate and up of the same outputs and writes SiLU(gate) * up. kFp8: E4M3 weights
/// of scale mode Mode (a.fp8).
template <class S, class T, class Out, bool kSilu, bool kFp8 = false, fp8_scale_mode Mode = fp8_scale_mode::per_row>
__global__ void __launch_bounds__(S::kThreads) grouped_gemm_kernel(grouped_gemm_args a) {
  constexpr int BM = S::BM, BN = S::BN, BK = S::BK, kStages = S::kStages, kThreads = S::kThreads;
  constexpr int kMt = S::kMt, kNt = S::kNt, kChunks = S::kChunks, kHalf = BN / 2;
  using L = smem_layout<S, kFp8>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int32_t a_row[BM];
  __shared__ int s_e, s_m0, s_rows;
  pdl_begin();
  const int N = a.n, K = a.k, E = a.num_experts;
  // This CTA's tile and column block: groups of kGroupTiles tiles (the last one maybe fewer),
  // each tile of the group over column block 0, then each over column block 1, ...
  const int num_col_blocks = (N + (kSilu ? kHalf : BN) - 1) / (kSilu ? kHalf : BN);
  const int num_tiles = int(gridDim.x) / num_col_blocks;
  const int group = S::kGroupTiles > 0 ? min(S::kGroupTiles, num_tiles) : num_tiles;
  const int first = int(blockIdx.x) / (group * num_col_blocks) * group;
  const int in_group = int(blockIdx.x) % (group * num_col_blocks), group_tiles = min(group, num_tiles - first);
  const int tile = first + in_group % group_tiles, col_block = in_group / group_tiles;
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
  const int n0 = col_block * (kSilu ? kHalf : BN);
  for (int r = threadIdx.x; r < BM; r += kThreads)
    a_row[r] = r < rows ? (a.a_rows ? a.a_rows[m0 + r] / a.a_rows_div : m0 + r) : -1;
  __syncthreads();
  const T* A = static_cast<const T*>(a.a);
  const int w_rows = (kSilu ? 2 : 1) * N;  // rows of an expert's weight matrix
  const T* W = static_cast<const T*>(a.w) + size_t(e) * w_rows * K;
  const uint8_t* Q = static_cast<const uint8_t*>(a.w) + size_t(e) * w_rows * K;  // kFp8: its codes
  const uint32_t s0 = smem_addr(smem);
  // B row r's weight row: n0 + r, or with kSilu gate row n0 + r % kHalf / its up row; col the
  // output column it feeds (past N: nothing).
  const auto b_row = [&](int r, int& col) {
    col = kSilu ? n0 + r % kHalf : n0 + r;
    return kSilu && r >= kHalf ? N + col : col;
  };
  // Slice [k0, k0 + BK) into stage `st`; chunks past the rows, columns or K are zero-filled
  // (K % 8 == 0, or 16 with E4M3: a chunk is wholly in or out).
  const auto load = [&](int st, int k0) {
    const uint32_t as = s0 + st * L::kStageBytes, bs = as + S::kABytes;
#pragma unroll
    for (int i = 0; i < BM * kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / kChunks, ch = c % kChunks, k = k0 + ch * 8;
      const int src = a_row[r];
      const bool ok = src >= 0 && k < K;
      cp_async16(as + swz<BK>(r, ch), ok ? A + size_t(src) * K + k : A, ok ? 16 : 0);
    }
    if constexpr (kFp8) {  // rows of BK codes, unswizzled: the conversion reads them row by row
#pragma unroll
      for (int i = 0; i < BN * L::kFp8Chunks / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads, r = c / L::kFp8Chunks, ch = c % L::kFp8Chunks, k = k0 + ch * 16;
        int col;
        const int wrow = b_row(r, col);
        const bool ok = col < N && k < K;
        const uint32_t dst = bs + uint32_t(r * BK + ch * 16);
        if constexpr (S::kPrefetch256)
          cp_async16_prefetch256(dst, ok ? Q + size_t(wrow) * K + k : Q, ok ? 16 : 0);
        else
          cp_async16(dst, ok ? Q + size_t(wrow) * K + k : Q, ok ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < BN * kChunks / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads, r = c / kChunks, ch = c % kChunks, k = k0 + ch * 8;
        int col;
        const int wrow = b_row(r, col);
        const bool ok = col < N && k < K;
        if constexpr (S::kPrefetch256)
          cp_async16_prefetch256(bs + swz<BK>(r, ch), ok ? W + size_t(wrow) * K + k : W, ok ? 16 : 0);
        else
          cp_async16(bs + swz<BK>(r, ch), ok ? W + size_t(wrow) * K + k : W, ok ? 16 : 0);
      }
    }
  };
  // kFp8: stage st's codes of slice [k0, k0 + BK) -> the converted slice, swizzled as a 16-bit
  // stage is: each code times its row's (or its 128 x 128 block's) scale, rounded once to T.
  const auto convert = [&](int st, int k0) {
    const uint8_t* codes = smem + st * L::kStageBytes + S::kABytes;
#pragma unroll
    for (int i = 0; i < BN * L::kFp8Chunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / L::kFp8Chunks, ch = c % L::kFp8Chunks;
      int col;
      const int wrow = b_row(r, col);
      float s = 0.0f;  // rows past N are zero codes; their scale is never read
      if (col < N)
        s = expert_fp8_scale_row(a.fp8, e, wrow, w_rows, K)[Mode == fp8_scale_mode::block128 ? k0 / kFp8Block : 0];
      const uint4 raw = *reinterpret_cast<const uint4*>(codes + r * BK + ch * 16);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint4 out[2];
      T* o = reinterpret_cast<T*>(out);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 lo = fp8::e4m3x2_to_float2(words[q]), hi = fp8::e4m3x2_to_float2(words[q] >> 16);
        o[4 * q] = from_f32<T>(lo.x * s);
        o[4 * q + 1] = from_f32<T>(lo.y * s);
        o[4 * q + 2] = from_f32<T>(hi.x * s);
        o[4 * q + 3] = from_f32<T>(hi.y * s);
      }
      st_shared16(s0 + L::kConverted + swz<BK>(r, 2 * ch), out[0]);
      st_shared16(s0 + L::kConverted + swz<BK>(r, 2 * ch + 1), out[1]);
    }
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / S::kWarpsN, warp_n = warp % S::kWarpsN;
  const int wm = warp_m * S::kWarpM, wn = warp_n * S::kWarpN;  // the warp's first row and B row
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
    const uint32_t as = s0 + (kt % kStages) * L::kStageBytes;
    uint32_t bs = as + S::kABytes;
    if constexpr (kFp8) {  // every warp is past slice kt - 1's products (the barrier above)
      convert(kt % kStages, kt * BK);
      __syncthreads();
      bs = s0 + L::kConverted;
    }
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[kMt][4];
#pragma unroll
      for (int i = 0; i < kMt; ++i)
        ldsm_x4(as + swz<BK>(wm + 16 * i + (lane & 15), ks * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
#pragma unroll
      for (int nb = 0; nb < kNt / 2; ++nb) {  // B rows b + [0, 16): two n8 tiles
        // kSilu: the first half of nb the warp's gate rows, the second half the matching up rows.
        constexpr int kGateNb = kNt / 4;
        const int b = !kSilu        ? wn + nb * 16
                      : nb < kGateNb ? warp_n * (S::kWarpN / 2) + nb * 16
                                     : kHalf + warp_n * (S::kWarpN / 2) + (nb - kGateNb) * 16;
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
      const int r = wm + 16 * i + (lane >> 2) + 8 * h;
      if (r >= rows) continue;
      Out* y = Y + size_t(m0 + r) * N;
      if constexpr (kSilu) {  // gate in n8 tiles [0, kNt / 2), up in the rest; each rounded to T as a stored gate_up
#pragma unroll
        for (int j = 0; j < kNt / 2; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int col = n0 + warp_n * (S::kWarpN / 2) + 8 * j + 2 * (lane & 3) + q;
            const float g = to_f32(from_f32<T>(acc[i][j][2 * h + q]));
            const float u = to_f32(from_f32<T>(acc[i][j + kNt / 2][2 * h + q]));
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

template <class S, class T, class Out, bool kSilu, bool kFp8, fp8_scale_mode Mode>
cudaError_t launch(const grouped_gemm_args& a, cudaStream_t s) {
  constexpr int kSmem = smem_layout<S, kFp8>::kBytes;
  // The largest shared-memory carveout: what lets two or three CTAs of a decode tile share an SM
  // (the kernel reads nothing through L1: cp.async.cg bypasses it).
  static const cudaError_t configured = [] {
    const auto kernel = grouped_gemm_kernel<S, T, Out, kSilu, kFp8, Mode>;
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    return e != cudaSuccess ? e
                            : cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                   int(cudaSharedmemCarveoutMaxShared));
  }();
  if (configured != cudaSuccess) return configured;
  const int cols = kSilu ? S::BN / 2 : S::BN;
  const long long ctas = static_cast<long long>(moe_max_tiles(a.num_pairs, a.num_experts, S::tile)) * ((a.n + cols - 1) / cols);
  if (ctas > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  return launch_pdl_smem(grouped_gemm_kernel<S, T, Out, kSilu, kFp8, Mode>, dim3(unsigned(ctas)),
                         dim3(S::kThreads), size_t(kSmem), s, a);
}

/// The kernel of shape S for dt, the weights' format and the output a asks for.
template <class S, bool kFp8, fp8_scale_mode Mode>
cudaError_t launch_format(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  if (a.silu_and_mul)
    AS_DISPATCH_ACT(dt, e = (launch<S, T, T, true, kFp8, Mode>(a, s)));
  else if (a.y_act)
    AS_DISPATCH_ACT(dt, e = (launch<S, T, T, false, kFp8, Mode>(a, s)));
  else
    AS_DISPATCH_ACT(dt, e = (launch<S, T, float, false, kFp8, Mode>(a, s)));
  return e;
}

template <class S>
cudaError_t launch_shape(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s) {
  if (!a.fp8.scale) return launch_format<S, false, fp8_scale_mode::per_row>(dt, a, s);
  if (a.fp8.mode == fp8_scale_mode::block128) return launch_format<S, true, fp8_scale_mode::block128>(dt, a, s);
  return launch_format<S, true, fp8_scale_mode::per_row>(dt, a, s);
}

}  // namespace

int grouped_gemm(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0 ||
      (a.fp8.scale && (a.k % 16 != 0 || a.fp8.parts < 1 || a.fp8.parts > 2)))
    return int(cudaErrorInvalidValue);
  switch (a.tile) {
    case moe_gemm_tile::m16: return int(launch_shape<tile_m16>(dt, a, s));
    case moe_gemm_tile::m32: return int(launch_shape<tile_m32>(dt, a, s));
    case moe_gemm_tile::m48: return int(launch_shape<tile_m48>(dt, a, s));
    case moe_gemm_tile::m64: return int(launch_shape<tile_m64>(dt, a, s));
    case moe_gemm_tile::m128: return int(launch_shape<tile_m128>(dt, a, s));
  }
  return int(cudaErrorInvalidValue);
}

moe_gemm_tile largest_moe_gemm_tile() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return moe_gemm_tile::m32;
  }
  const auto fits = [&](int smem, int static_smem) { return smem + static_smem <= bytes; };
  if (fits(tile_m128::kSmem, tile_m128::kStaticSmem)) return moe_gemm_tile::m128;
  if (fits(tile_m64::kSmem, tile_m64::kStaticSmem)) return moe_gemm_tile::m64;
  return moe_gemm_tile::m32;
}

}  // namespace actorserve::gpu::cuda
