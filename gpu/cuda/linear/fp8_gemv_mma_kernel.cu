// The FP8 GEMVs on the tensor cores (fp8_gemv_mma.hpp): the bulk-copy ring of gemv_bulk_ring.cuh
// with groups of 16 E4M3 weight rows, a stage holding 64 16-byte chunks (1,024 codes) of each.
// Warp w of the 4 consumer warps takes chunks [16 w, 16 w + 16) of a stage in 4 steps of 4; in a
// step, lane l (row r = l / 4 of the tile, quad position t = l % 4) loads chunk 4 j + t of weight
// rows r and r + 8 and, if token r is one of the m, the 16 activations of that chunk. An
// m16n8k16 MMA sums 16 products a row and column; the k order inside it is free as long as A and
// B agree, so MMA i of a step takes codes 4 i .. 4 i + 3 of each lane's chunk: the pair 4 i,
// 4 i + 1 fills the lane's fragment slots 2 t, 2 t + 1 (a0 of row r, a1 of row r + 8) and the pair
// 4 i + 2, 4 i + 3 its slots 2 t + 8, 2 t + 9 (a2, a3), the activations likewise (b0, b1). One
// cvt.rn.f16x2.e4m3x2 gives a fragment register, so each 32-bit word of codes is two registers and
// a 16-byte chunk is four MMAs. Each step accumulates into its own tile (kChains of them), so the
// MMAs of a stage form 4 independent chains instead of one of 16; a group's tiles are summed in
// a fixed order at its end. Each row of a stage is followed by 64 unused bytes: the 8 lanes of a
// shared-memory phase read rows r and r + 1 at the same offset, which then fall on different
// banks. The warps' fp32 tiles are summed in warp order (gemv_common.cuh's partials) and divided
// by each activation row's power-of-two scale; the scale per weight row comes last, as in fp8_gemv.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv.cuh"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_gemv_epilogue.cuh"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/gemv_bulk_ring.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_epilogue.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;
using namespace dev::gemv::bulk;
using dev::fp8::row_scaled;

constexpr int kTileRows = 16;                  // weight rows a group: the MMA's M
constexpr int kTileCols = fp8_gemv_mma_max_m;  // activation rows (tokens): the MMA's N
constexpr int kPad = 4;                        // unused chunks after each row of a stage
using mma_ring = ring_smem<kTileRows, kPad, kTileCols>;
constexpr int kWarpChunks = kSlice<kTileRows> / kWarps;  // chunks of a row a warp takes in a stage
constexpr int kSteps = kWarpChunks / 4;                  // a quad takes 4 chunks a step
constexpr int kChains = kSteps;                          // accumulator tiles: one a step
static_assert(kWarpChunks == 16, "4 steps of a quad's 4 chunks a warp");
static_assert(kTileRows * kTileCols == kThreads, "a consumer thread an output of a group");

/// A lane's fp32 accumulator tiles: rows r and r + 8, columns 2 t and 2 t + 1, one tile per
/// chain of MMAs.
struct mma_tile {
  float c[kChains][4];
};

/// Each warp's tiles, summed in chain order, into its partial sums (no shuffles: every lane holds
/// 4 distinct sums).
struct tile_sums {
  __device__ __forceinline__ void operator()(const mma_tile& acc, partials<kTileCols, kTileRows>& red) const {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x % kThreads) >> 5, r = lane >> 2, col = 2 * (lane & 3);
    float sum[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sum[e] = acc.c[0][e];
#pragma unroll
      for (int ch = 1; ch < kChains; ++ch) sum[e] += acc.c[ch][e];
    }
    float* v = red.v[warp];
    v[r * kTileCols + col] = sum[0];
    v[r * kTileCols + col + 1] = sum[1];
    v[(r + 8) * kTileCols + col] = sum[2];
    v[(r + 8) * kTileCols + col + 1] = sum[3];
  }
};

/// The activation rows' power-of-two scales: up[i] = 2^s brings row i's largest |x| into
/// [2^14, 2^15) (fp16's largest value is 65504), down[i] = 2^-s; s within [-126, 126], so both
/// are normal floats (an all-zero row: s = 0).
struct act_scales {
  float up[kTileCols], down[kTileCols];
  uint32_t warp_amax[kWarps][kTileCols];
};

/// Fills `sc` for the m rows of x (128 consumer threads, after the previous grid).
template <class T>
__device__ __forceinline__ void find_act_scales(const T* x, int m, int k, act_scales& sc) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, loads = k / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  for (int i = 0; i < m; ++i) {
    uint32_t amax = 0;
#pragma unroll 8
    for (int c = tid; c < loads; c += kThreads) amax = dev::fp8::amax8<T>(__ldg(xv + size_t(i) * loads + c), amax);
    amax = __reduce_max_sync(0xffffffffu, amax);
    if (lane == 0) sc.warp_amax[warp][i] = amax;
  }
  consumers_sync();
  if (tid < m) {
    uint32_t amax = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = max(amax, sc.warp_amax[w][tid]);
    // amax in [2^(e - 127), 2^(e - 126)) for biased exponent e >= 1: s = 14 - (e - 127).
    const int e = int(amax >> 23), s = amax == 0 ? 0 : min(126, max(-126, 141 - (e == 0 ? 1 : e)));
    sc.up[tid] = __int_as_float((127 + s) << 23);
    sc.down[tid] = __int_as_float((127 - s) << 23);
  }
  consumers_sync();
}

/// The partial sums `red` of a group read as red's totals times the activation row's 2^-s.
template <class Red>
struct unscaled_totals {
  const Red& red;
  const float* down;
  __device__ __forceinline__ float total(int r, int i) const { return red.total(r, i) * down[i]; }
};

/// Epilogue Epi of a group of the tile's rows, seeing every dot product divided by its
/// activation row's power-of-two scale again.
template <class Epi>
struct act_unscaled {
  Epi epi;
  const float* down;
  __host__ __device__ __forceinline__ int groups() const { return epi.groups(); }
  __device__ __forceinline__ int row(int g, int r) const { return epi.row(g, r); }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    epi.template finish<T>(g, unscaled_totals<Red>{red, down}, tid);
  }
};

/// Plain fp32 outputs of m activation rows: group g holds weight rows g * 16 + r; thread
/// 8 r + i writes row r's output for activation row i, as fp8_gemv scales and stores it.
struct mma_store_epilogue {
  float* y;
  const float* scale;
  int n, m;
  float beta;
  __host__ __device__ __forceinline__ int groups() const { return (n + kTileRows - 1) / kTileRows; }
  __device__ __forceinline__ int row(int g, int r) const { return min(g * kTileRows + r, n - 1); }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    const int r = tid / kTileCols, i = tid % kTileCols, out = g * kTileRows + r;
    if (i < m && out < n)
      dev::fp8::store_row<fp8_scale_mode::per_row>(y + size_t(i) * n + out, red.total(r, i), scale, out, beta);
  }
};

/// Two E4M3 codes (the low 16 bits of `two`, low byte first) as an fp16 pair, low half first
/// (one cvt.rn.f16x2.e4m3x2 from sm_89 on).
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

/// The 16 activations of a 16-byte-chunk pair times `up`, as 8 fp16 pairs in element order.
template <class T>
__device__ __forceinline__ void scaled_half_pairs(const uint4& lo, const uint4& hi, float up, uint32_t (&b)[8]) {
  const T* e0 = reinterpret_cast<const T*>(&lo);
  const T* e1 = reinterpret_cast<const T*>(&hi);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    b[p] = attn_dev::elem<__half>::pack(to_f32(e0[2 * p]) * up, to_f32(e0[2 * p + 1]) * up);
    b[4 + p] = attn_dev::elem<__half>::pack(to_f32(e1[2 * p]) * up, to_f32(e1[2 * p + 1]) * up);
  }
}

/// The bulk-copy engine and mbarrier transaction counts need sm_90 (and the E4M3 pair conversion
/// sm_89): for older targets the kernel traps, and fp8_gemv_mma_supported refuses where the GPU
/// or the loaded code lacks them. Epi: mma_store_epilogue, or a fused epilogue with row scales.
template <class T, class Epi>
__global__ void __launch_bounds__(kBlockThreads, 1) fp8_gemv_mma_kernel(const T* x, int m, int k, const uint8_t* q,
                                                                         Epi epi, int stages, bool evict_first) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  extern __shared__ uint4 smem[];
  __shared__ act_scales sc;
  const mma_ring sm(smem, stages);
  launch_dependents();
  sm.init(stages);
  const int chunks = k / 16;
  if (threadIdx.x >= kThreads) {  // the producer warp: weights only, no wait for the previous grid
    if (threadIdx.x == kThreads) produce(sm, q, size_t(k), chunks, epi, stages, evict_first);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, t = lane & 3;
  const bool token = r < m;
  const uint4* const xv = reinterpret_cast<const uint4*>(x) + size_t(token ? r : 0) * (k / 8);
  const act_unscaled<Epi> out{epi, sc.down};
  consume<T, mma_tile>(
      sm, chunks, out, stages,
      [&](int, mma_tile& acc, const uint4* st, int c0) {
        const int len = min(kSlice<kTileRows>, chunks - c0);  // the slice's chunks a row
        const float up = sc.up[token ? r : 0];
        const uint4 zero = make_uint4(0, 0, 0, 0);
        // The activations of all 4 steps first, so their loads are in flight together.
        uint4 xs[kSteps][2];
#pragma unroll
        for (int j = 0; j < kSteps; ++j) {
          const int c = warp * kWarpChunks + 4 * j + t;
          const bool load = token && c < len;
          xs[j][0] = load ? __ldg(xv + 2 * (c0 + c)) : zero;
          xs[j][1] = load ? __ldg(xv + 2 * (c0 + c) + 1) : zero;
        }
#pragma unroll
        for (int j = 0; j < kSteps; ++j) {
          const int c = warp * kWarpChunks + 4 * j + t;  // this lane's chunk of the stage
          if (c - t >= len) break;                        // the whole quad past the slice: every lane
          const bool live = c < len;
          const uint4 w0 = live ? st[r * mma_ring::kRowStride + c] : zero;
          const uint4 w1 = live ? st[(r + 8) * mma_ring::kRowStride + c] : zero;
          uint32_t b[8];
          scaled_half_pairs<T>(xs[j][0], xs[j][1], up, b);
          const uint32_t a0[4] = {w0.x, w0.y, w0.z, w0.w}, a1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t a[4] = {e4m3x2_to_half2(a0[i]), e4m3x2_to_half2(a1[i]), e4m3x2_to_half2(a0[i] >> 16),
                                   e4m3x2_to_half2(a1[i] >> 16)};
            attn_dev::elem<__half>::mma(acc.c[j % kChains], a, b[2 * i], b[2 * i + 1]);
          }
        }
      },
      tile_sums{}, [&] { find_act_scales<T>(x, m, k, sc); });
#endif
}

/// The grid for `groups` groups: a group of 16 rows is a large unit of work, so where the
/// groups fill several rounds of bulk.blocks_per_sm blocks an SM, fewer blocks an SM may leave
/// less of the last round idle (Llama-3-8B's gate/up: 1,792 groups are 3.4 rounds of 528 blocks,
/// 6.8 of 264). Fewer blocks take proportionally more stages each, so the bytes in flight stay.
bulk_gemv_tuning balanced_grid(const bulk_gemv_tuning& bulk, int groups) {
  bulk_gemv_tuning t = bulk;
  const int per_sm = bulk.blocks_per_sm < 1 ? 1 : bulk.blocks_per_sm, sms = current_sm_count();
  if (groups <= per_sm * sms) return t;  // one round
  const auto idle = [&](int b) {         // the last round's idle share of the work
    const double rounds = double(groups) / double(b * sms);
    return std::ceil(rounds) / rounds - 1.0;
  };
  int best = per_sm;
  for (int b = per_sm - 1; b >= 1; --b)
    if (idle(b) + 0.02 < idle(best)) best = b;
  t.blocks_per_sm = best;
  t.stages = std::min(mma_ring::kStagesMax, std::max(1, bulk.stages) * per_sm / best);
  return t;
}

template <class T, class Epi>
int launch_mma(const void* x, int m, int k, const uint8_t* q, const Epi& epi, cudaStream_t s,
               const bulk_gemv_tuning& bulk) {
  static std::atomic<size_t> allowed{48 * 1024};  // per kernel: the dynamic shared memory it may take
  return launch_ring<mma_ring>(fp8_gemv_mma_kernel<T, Epi>, allowed, epi.groups(), s,
                               balanced_grid(bulk, epi.groups()), static_cast<const T*>(x), m, k, q, epi);
}

}  // namespace

bool fp8_gemv_mma_supported(const void* x, int m, int k, const void* q) {
  return m >= 1 && m <= fp8_gemv_mma_max_m && fp8_gemv_bulk_supported(x, k, q);
}

int fp8_gemv_mma(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* scale, int n, float* y,
                 float beta, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_mma_supported(x, m, k, q)) return int(cudaErrorInvalidValue);
  if (n <= 0) return 0;
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_mma<T>(x, m, k, q, mma_store_epilogue{y, scale, n, m, beta}, s, bulk));
  return rc;
}

int fp8_gemv_mma_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                          const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_mma_supported(x, 1, k, q)) return int(cudaErrorInvalidValue);
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_mma<T>(x, 1, k, q, row_scaled<qkv_rope_epilogue<8>>{{a}, scale}, s, bulk));
  return rc;
}

int fp8_gemv_mma_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                              void* act, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_mma_supported(x, 1, k, q)) return int(cudaErrorInvalidValue);
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_mma<T>(x, 1, k, q, row_scaled<gate_up_epilogue<8>>{{act, inter}, scale}, s, bulk));
  return rc;
}

}  // namespace actorserve::gpu::cuda
