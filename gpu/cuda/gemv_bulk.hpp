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

#include "gpu/cuda/kernels.hpp"

namespace actorserve::gpu::cuda {

/// Which one-token GEMVs of gemv_kernel.hpp take the bulk path (bits; ACTORSERVE_BULK_GEMV at
/// start, default all): the plain GEMV at m = 1 with beta 0 (o, down, lm_head), the QKV + rope
/// GEMV, the gate/up + SiLU GEMV. Process-wide. For benchmarks and tests.
inline constexpr int bulk_plain = 1, bulk_qkv = 2, bulk_gate_up = 4, bulk_all = 7;
void set_bulk_gemv(int mask);
int bulk_gemv();

/// The default grid, measured best on the H200 (bench/results/h200-step-20261201.md): 4 blocks per
/// SM of 3 ring stages (196 KiB of shared memory an SM, so the next kernel's blocks are placed only
/// as this one's leave, evenly; grids that leave room for some were slower, up to 5.15 ms a step),
/// 2 rotary pairs per QKV group, the weights' L2 lines marked evict-first. Random Llama-3-8B, batch
/// 1, against the register GEMVs in the same call: step 4.485 -> 4.016 ms, 128 in / 256 out
/// 220.8 -> 247.1-250.9 tok/s end to end.
inline constexpr int bulk_default_blocks = 4, bulk_default_stages = 3, bulk_default_qkv_pairs = 2;
inline constexpr bool bulk_default_evict_first = true;

/// The bulk grid: blocks per SM (ACTORSERVE_BULK_GEMV_BLOCKS) and 16 KiB ring stages per block
/// (ACTORSERVE_BULK_GEMV_STAGES; 1 to 13). For benchmarks and tests.
void set_bulk_gemv_grid(int blocks_per_sm, int stages);

/// Rotary pairs per group of the bulk QKV + rope GEMV: 1 (2 rows) or 2 (4 rows;
/// ACTORSERVE_BULK_QKV_PAIRS). For benchmarks and tests.
void set_bulk_qkv_pairs(int pairs);

/// Whether the bulk copies mark the weights' L2 lines first to evict (ACTORSERVE_BULK_EVICT_FIRST).
/// For benchmarks and tests.
void set_bulk_evict_first(bool on);

/// The bulk kernels themselves (operands as gemv_supported(x, 1, k, w) requires); the launchers
/// of gemv_kernel.hpp call them where bulk_gemv() says so.
int gemv_bulk(act_dtype dt, const void* x, int k, const void* w, int n, float* y, cudaStream_t s);
int gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s);
/// rows_per_block: 2 or 4 weight rows per group.
int gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
