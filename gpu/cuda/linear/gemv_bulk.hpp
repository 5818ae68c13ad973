#pragma once
/// One-token GEMVs (m = 1) that stream their weights through the bulk-copy engine (sm_90
/// cp.async.bulk) into a ring of shared-memory stages instead of registers. A grid of a few
/// persistent blocks per SM loops over groups of weight rows; one producer thread per block keeps
/// the ring full, 128 consumer threads compute. The weights never depend on earlier kernels, so
/// under programmatic launch a block fills its whole ring before the previous kernel has finished:
/// with the ring in shared memory (not registers) the next GEMV's blocks fit beside the running
/// one's, and its first weights are already on chip when its input is ready.
///
/// Each consumer thread takes the chunks a 128-thread gemv_kernel.cu block gives it, in the same
/// order, and reduces as it does: the outputs equal gemv, gemv_qkv_rope and gemv_gate_up_silu bit
/// for bit. Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// Which one-token GEMVs take this path, and its grid (blocks per SM, 16 KiB ring stages, rotary
/// pairs per QKV group, the evict-first hint), are bulk_gemv_tuning's fields (tuning.hpp).

/// The bulk kernels themselves (operands as gemv_supported(x, 1, k, w) requires) on the grid of
/// `bulk`; the launchers of gemv_kernel.hpp call them where `bulk` says so.
int gemv_bulk(act_dtype dt, const void* x, int k, const void* w, int n, float* y, cudaStream_t s,
              const bulk_gemv_tuning& bulk = {});
int gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s,
                       const bulk_gemv_tuning& bulk = {});
/// rows_per_block: 2 or 4 weight rows per group.
int gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

}  // namespace actorserve::gpu::cuda
