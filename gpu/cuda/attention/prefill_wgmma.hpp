#pragma once
/// Hopper (sm_90a) tensor-core prefill: warpgroup MMAs (wgmma) over prefill items of up to 128
/// query rows of one sequence and KV head, selected by launch_tc_prefill.
#include <cuda_runtime_api.h>

#include "gpu/cuda/attention/kv_tensor_map.hpp"
#include "gpu/cuda/attention/launch.hpp"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

/// Query rows per item of the wgmma kernels (two warpgroups of 64 rows sharing each K/V tile).
inline constexpr int wgmma_pair_rows = 128;

/// Whether prefill_kernel::automatic runs the persistent wgmma kernel for these shapes: bf16,
/// head dim 128 and blocks a TMA box can cover (8, 16, 32 or a multiple of 64 tokens,
/// kv_box_rows); every other shape (fp16, head dim 64, blocks of 80) runs mma_sync.
inline constexpr bool wgmma_prefill_default(act_dtype dt, int head_dim, int block_size) {
  return dt == act_dtype::bf16 && head_dim == 128 && kv_box_rows(block_size) > 0;
}

/// Whether the current device runs the wgmma kernels (compute capability 9.x; cached).
bool wgmma_prefill_available();

/// The kernel a launch asking for `k` runs: automatic becomes wgmma_tma_persistent where
/// wgmma_prefill_default holds, else mma_sync; any kernel is mma_sync on a device without wgmma;
/// wgmma_tma_persistent outside bf16 / head dim 128 is wgmma_cp_async.
inline prefill_kernel effective_prefill_kernel(prefill_kernel k, act_dtype dt, int head_dim, int block_size) {
  if (k == prefill_kernel::mma_sync || !wgmma_prefill_available()) return prefill_kernel::mma_sync;
  if (k == prefill_kernel::automatic)
    return wgmma_prefill_default(dt, head_dim, block_size) ? prefill_kernel::wgmma_tma_persistent
                                                           : prefill_kernel::mma_sync;
  if (k == prefill_kernel::wgmma_tma_persistent && (dt != act_dtype::bf16 || head_dim != 128))
    return prefill_kernel::wgmma_cp_async;
  return k;
}

/// Launches the wgmma prefill kernel `k` (wgmma_tma_persistent or wgmma_cp_async) over the
/// 128-row items [0, counts[0]); a CUDA error code.
int launch_wgmma_prefill(act_dtype dt, const attn_launch& a, prefill_kernel k, cudaStream_t s);

/// The persistent producer / two-consumer kernel (bf16, D 128 only; wgmma_cp_async where the
/// cache's TMA descriptors cannot be made); a CUDA error code.
int launch_wgmma_persistent(act_dtype dt, const attn_launch& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
