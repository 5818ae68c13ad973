#pragma once
/// Hopper (sm_90a) tensor-core prefill: warpgroup MMAs (wgmma) over the same prefill items as
/// launch_tc_prefill (64 query rows of one sequence and KV head each), selected there.
#include <cuda_runtime_api.h>

#include "gpu/cuda/attention/kv_tensor_map.hpp"
#include "gpu/cuda/attention/launch.hpp"

namespace actorserve::gpu::cuda {

/// Prefill variants (attn_launch::variant, prefill_variant) that run on wgmma: 3 = one
/// producer warp filling a 2-stage K/V ring, one consumer warpgroup (bf16/fp16, D 64/128);
/// 4 = one warpgroup that copies and computes in turn, no warp specialisation; 5 = variant 3
/// with a 3-stage ring; 7 = 32-key tiles, 3 stages, 3 CTAs per SM. 4, 5 and 7 are built for
/// bf16, D 128 only (others run 3). Variant 6 (P V left in flight across the next S) was
/// measured and removed: ptxas serialised its MMAs. 9 = items of up to 128 rows (two
/// warpgroups sharing each K/V tile), for a planner that cuts 128-row tiles (wgmma_pair_rows);
/// with 64-row items its second warpgroup idles (the backends cut 128-row items for it).
/// 10, 13 = FlashAttention-3's scheduling over 128-row items (prefill_pingpong_kernel.cu, bf16
/// and D 128; elsewhere they run 9): a producer warpgroup filling a K/V ring, two consumer
/// warpgroups taking turns at the MMAs, each overlapping its softmax of S(t) with its
/// P(t-1) V(t-1); 10 = 64-key tiles, 13 = 128-key tiles. Measured correct and slower than 4.
/// 11 = 10 with the K/V ring filled by TMA (one producer warp issuing boxes of one block or
/// 64 tokens x 64 elements, kv_tensor_map.hpp) instead of cp.async from the whole producer
/// warpgroup; 15 (the default, wgmma_default_variant) = 11 on persistent CTAs: one per SM
/// walking the items, the queries of the next item staged by the producer warpgroup's idle
/// warps while the current one runs. Measured and removed: 15 with 5 stages (no faster) and
/// with 128-key tiles (slower), docs/attention.md.
inline constexpr bool is_wgmma_prefill_variant(int v) {
  return v == 3 || v == 4 || v == 5 || v == 7 || v == 9 || v == 10 || v == 11 || v == 13 || v == 15;
}

/// Whether prefill variant `v` is one of the producer / two-consumer kernels (10, 11, 13, 15).
inline constexpr bool wgmma_pingpong_variant(int v) { return v == 10 || v == 11 || v == 13 || v == 15; }

/// Whether prefill variant `v` fills its K/V ring by TMA (11, 15).
inline constexpr bool wgmma_tma_variant(int v) { return v == 11 || v == 15; }

/// The variant whose persistent CTAs copy attn_launch::q16 in when it is set (15).
inline constexpr bool wgmma_reads_q16(int v) { return v == 15; }

/// Query rows per item that the paired-warpgroup variants (9 and the pingpong ones) are built for.
inline constexpr int wgmma_pair_rows = 128;

/// Whether prefill variant `v` takes 128-row items (wgmma_pair_rows) instead of 64.
inline constexpr bool wgmma_paired_variant(int v) { return v == 9 || wgmma_pingpong_variant(v); }

/// The prefill variant that forces the mma.sync kernel in its default configuration (what
/// variant 0 ran before the wgmma kernel became the default for some shapes).
inline constexpr int mma_sync_prefill_variant = 8;

/// Whether variant 0 runs a wgmma kernel for these shapes: bf16, head dim 128 and blocks a TMA
/// box can cover (8, 16, 32 or a multiple of 64 tokens, kv_box_rows). Measured on the H200
/// (docs/attention.md): variant 15 against variant 4 (the default before it, blocks of 64k
/// tokens only) and the mma.sync kernel (every other shape: fp16, head dim 64, blocks of 80).
inline constexpr bool wgmma_prefill_default(act_dtype dt, int head_dim, int block_size) {
  return dt == act_dtype::bf16 && head_dim == 128 && kv_box_rows(block_size) > 0;
}

/// The wgmma variant that variant 0 runs where wgmma_prefill_default holds.
inline constexpr int wgmma_default_variant = 15;

/// Whether the current device runs the wgmma kernels (compute capability 9.x; cached).
bool wgmma_prefill_available();

/// The prefill variant a launch with attn_launch::variant `v` runs: variant 0 becomes
/// wgmma_default_variant where wgmma_prefill_default holds on a device that runs wgmma.
inline int effective_prefill_variant(int v, act_dtype dt, int head_dim, int block_size) {
  const int p = prefill_variant(v);
  if (p == 0 && wgmma_prefill_default(dt, head_dim, block_size) && wgmma_prefill_available())
    return wgmma_default_variant;
  return p;
}

/// Launches the wgmma prefill over items [0, counts[0]) for `variant` (3, 4, 5, 7, 9, 10, 11,
/// 13 or 15); a CUDA error code.
int launch_wgmma_prefill(act_dtype dt, const attn_launch& a, int variant, cudaStream_t s);

/// The producer / two-consumer kernels (variants 10, 11, 13, 15; bf16, D 128 only) over 128-row items;
/// a CUDA error code.
int launch_wgmma_pingpong(act_dtype dt, const attn_launch& a, int variant, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
