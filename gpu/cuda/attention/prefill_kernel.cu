// Causal, variable-length prefill (and chunked prefill over a cached prefix, with or without a
// sliding window: attn_launch::window masks the keys below each row's window) on tensor cores
// (mma.sync m16n8k16, FlashAttention-2 style): a CTA of NW warps takes NW x 16 query rows
// (tokens x heads of one GQA group, so K/V tiles serve the whole group) and streams the paged
// K/V in 64-token tiles through an S-stage cp.async pipeline; each warp owns 16 rows and skips
// the tiles its rows cannot see. Built as 4 warps, 64-key tiles, 2 stages (2 CTAs per SM).
// Over the FP8 cache (kFp8) the stages hold E4M3 bytes; once a tile has landed the CTA converts
// it (exactly) into one 16-bit K/V tile pair that every warp reads, k_scale folded into the
// queries' scale and v_scale into the output's normalisation.
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/fp8_tiles.cuh"
#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int NW = 4;

/// The stages (16-bit, or E4M3 bytes plus the converted 16-bit tile pair), the Q tile.
template <int D, int kTile, int kStages, bool kFp8 = false>
constexpr int prefill_smem_bytes() {
  return kFp8 ? kStages * 2 * kTile * D + 2 * kTile * D * 2 + NW * 16 * D * 2
              : kStages * 2 * kTile * D * 2 + NW * 16 * D * 2;
}

/// kTile keys per pipeline stage, kStages stages, kMinBlocks resident CTAs per SM asked of ptxas;
/// kFp8: the cache holds E4M3 bytes (attn_launch::kv_fp8).
template <class T, int D, int kTile, int kStages, int kMinBlocks, bool kFp8>
__global__ void __launch_bounds__(NW * 32, kMinBlocks) tc_prefill_kernel(attn_launch a) {
  constexpr int kTileBytes = kTile * D * (kFp8 ? 1 : 2), kThreads = NW * 32, kRows = NW * 16;
  constexpr int kConvBytes = kTile * D * 2;  // kFp8: one converted 16-bit tile (K or V)
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const attn_item it = a.items[blockIdx.x];
  const attn_seq sq = a.seqs[it.seq];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const int valid = it.q_len * G;
  const uint32_t s0 = smem_addr(smem_raw), conv = s0 + kStages * 2 * kTileBytes;
  const uint32_t q_s = conv + (kFp8 ? 2 * kConvBytes : 0);
  const int32_t* bt = a.block_tables + sq.bt_offset;
  using E = std::conditional_t<kFp8, uint8_t, uint16_t>;  // one cache element
  const auto* kc = static_cast<const E*>(a.k_cache);
  const auto* vc = static_cast<const E*>(a.v_cache);
  // Position of the first query token of this tile; row r is token r / G.
  const int pos0 = sq.context_len - sq.q_len + (it.q_begin - sq.q_start);
  const int r0 = warp * 16 + lane / 4;
  const int qpos[2] = {pos0 + min(r0, valid - 1) / G, pos0 + min(r0 + 8, valid - 1) / G};
  const int warp_last = pos0 + min(warp * 16 + 15, valid - 1) / G;  // the warp's furthest-seeing row
  const int warp_first = pos0 + min(warp * 16, valid - 1) / G;
  // Sliding window: each row's first key, and the first key any row of the warp sees.
  const int qlo[2] = {window_first_key(qpos[0], a.window), window_first_key(qpos[1], a.window)};
  const int warp_lo = window_first_key(warp_first, a.window), warp_hi_lo = window_first_key(warp_last, a.window);
  const int ntiles = (it.kv_end - it.kv_begin + kTile - 1) / kTile;
  const auto issue = [&](int tile, int stage) {
    const uint32_t dst = s0 + stage * 2 * kTileBytes;
    load_kv_tile<D, kTile, kThreads>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads, it.kv_begin + tile * kTile,
                                     it.kv_end, dst, dst + kTileBytes, tid);
  };
  kv_ring_start<kStages>(ntiles, issue);
  if constexpr (kFp8)
    stage_q_scaled<T, D, kThreads>(a, a.scale * 1.4426950408889634f * a.k_scale, it.q_begin, it.kv_head, kRows, valid,
                                   q_s, tid);
  else
    stage_q<T, D, kThreads>(a, it.q_begin, it.kv_head, kRows, valid, q_s, tid);
  __syncthreads();
  warp_rows<T, D> w;
  w.init(q_s + warp * 16 * D * 2, lane);
  for (int t = 0; t < ntiles; ++t) {
    kv_ring_next<kStages>(t, ntiles, issue);
    const int k0 = it.kv_begin + t * kTile;
    uint32_t k_s = s0 + (t % kStages) * 2 * kTileBytes;
    if constexpr (kFp8) {
      // Each warp converts 16 keys of K and V; the next kv_ring_next's barrier keeps the
      // converted pair until every warp has read it.
      convert_rows_fp8<T, D, 16>(k_s, warp * 16, conv + warp * 16 * D * 2, lane);
      convert_rows_fp8<T, D, 16>(k_s + kTileBytes, warp * 16, conv + kConvBytes + warp * 16 * D * 2, lane);
      __syncthreads();
      k_s = conv;
    }
    // Causal: no row of this warp sees these keys; window: all of them precede every row's window.
    if (k0 > warp_last || k0 + kTile <= warp_lo) continue;
    float sc[kTile / 8][4];
    w.template scores<kTile>(k_s, 0, lane, sc);
    if (k0 + kTile - 1 > warp_first || k0 + kTile > it.kv_end || k0 < warp_hi_lo) {
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kpos = k0 + n * 8 + (lane % 4) * 2 + (e & 1);
          if (kpos > qpos[e >> 1] || kpos >= it.kv_end || kpos < qlo[e >> 1]) sc[n][e] = -INFINITY;
        }
    }
    w.template accumulate<kTile>(sc, k_s + (kFp8 ? kConvBytes : kTileBytes), 0, lane);
  }
  w.finish_sums();
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + h * 8;
    if (r >= valid) continue;
    const int tok = it.q_begin + r / G, head = it.kv_head * G + r % G;
    float inv = w.l[h] > 0.0f ? 1.0f / w.l[h] : 0.0f;
    if constexpr (kFp8) inv *= a.v_scale;
    T* dst = out + size_t(tok) * a.num_heads * D + head * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) = elem<T>::pack(w.o[n][2 * h] * inv, w.o[n][2 * h + 1] * inv);
  }
}

template <class T, int D, int kTile, int S, int B, bool kFp8>
int launch_config(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = prefill_smem_bytes<D, kTile, S, kFp8>();
  static const cudaError_t configured = cudaFuncSetAttribute(tc_prefill_kernel<T, D, kTile, S, B, kFp8>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (configured != cudaSuccess) return int(configured);
  if (a.prefill_grid > 0) tc_prefill_kernel<T, D, kTile, S, B, kFp8><<<a.prefill_grid, NW * 32, smem, s>>>(a);
  return int(cudaGetLastError());
}

template <class T, int D>
int launch(const attn_launch& a, cudaStream_t s) {
  static_assert(tc_prefill_rows == NW * 16, "the plan's tile rows are the kernel's");
  static_assert(tc_prefill_key_tile == 64, "the plan's window starts are multiples of the kernel's key tile");
  return a.kv_fp8 ? launch_config<T, D, 64, 2, 2, true>(a, s) : launch_config<T, D, 64, 2, 2, false>(a, s);
}

}  // namespace

int launch_tc_prefill(act_dtype dt, const attn_launch& a, prefill_kernel k, cudaStream_t s) {
  // The Hopper wgmma kernels (prefill_wgmma_kernel.cu, prefill_pingpong_kernel.cu) over 128-row
  // items; this file's mma.sync kernel over 64-row items.
  // The FP8 cache runs on the mma.sync kernel (the backend plans its 64-row items for it).
  const prefill_kernel run = a.kv_fp8 ? prefill_kernel::mma_sync : effective_prefill_kernel(k, dt, a.head_dim, a.block_size);
  if (run != prefill_kernel::mma_sync) return launch_wgmma_prefill(dt, a, run, s);
  if (a.head_dim == 128) return dt == act_dtype::bf16 ? launch<__nv_bfloat16, 128>(a, s) : launch<__half, 128>(a, s);
  if (a.head_dim == 64) return dt == act_dtype::bf16 ? launch<__nv_bfloat16, 64>(a, s) : launch<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
