#pragma once
/// The one-token FP8 GEMV (m = 1) that streams its E4M3 weights through the bulk-copy engine (sm_90
/// cp.async.bulk) into a ring of shared-memory stages, as the 16-bit one-token GEMVs of
/// gemv_bulk.hpp do: persistent blocks (bulk_gemv_tuning's blocks_per_sm and stages) loop over
/// groups of 4 or 8 weight rows (its fp8_rows), one producer thread per block keeps the ring full
/// and 128 consumer threads convert the codes and compute. It computes fp8_gemv's m = 1 outputs (fp8_linear.hpp)
/// bit for bit: each consumer thread takes the 16-byte loads a thread of fp8_gemv's block takes,
/// in the same order, with the same fmas, warp sums, sum over the 4 warps and scaling.
/// Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// Whether fp8_gemv_bulk can run these operands on the loaded GPU and code: fp8_gemv_supported(x,
/// 1, k, q) (k a positive multiple of 16, x and q 16-byte aligned, so every weight row and each
/// copied slice of it starts and ends on a 16-byte boundary, as cp.async.bulk requires) and
/// runs_tma(loaded_gpu_target()) (compute capability 9.x running sm_90 code).
bool fp8_gemv_bulk_supported(const void* x, int k, const void* q);

/// y[n] (fp32) = x[k] (dt) * (e4m3(Q) x scale)^T + beta * y, as fp8_gemv with m = 1 computes it
/// (the same bits), on the grid of `bulk` (its blocks_per_sm, stages, evict_first and fp8_rows; its
/// flags say which callers take this path, not this function). Launches as a programmatic dependent:
/// its blocks start copying weights before the previous kernel has finished and wait for it
/// before reading x or y. Operands fp8_gemv_bulk_supported refuses, and fp8_rows other than 4 or
/// 8, return cudaErrorInvalidValue (nothing launched). Returns the launch's cudaError_t.
int fp8_gemv_bulk(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int n, float* y,
                  float beta, cudaStream_t s, fp8_scale_mode mode = fp8_scale_mode::per_row,
                  const bulk_gemv_tuning& bulk = {});

/// The fused one-token FP8 GEMVs of fp8_gemv_fused.hpp (per-row scales) on the ring: the same
/// outputs as there, bit for bit. Their groups are the FP8 GEMV's bulk.fp8_rows weight rows, so a
/// stage carries as many weight bytes a row as fp8_gemv_bulk's (half those of a 16-bit row): for
/// 8, the QKV + rope GEMV takes 4 rotary pairs a group and the gate/up + SiLU GEMV 4 gate rows
/// and their 4 up rows; for 4, 2 and 2. Operands fp8_gemv_bulk_supported refuses, and fp8_rows
/// other than 4 or 8, return cudaErrorInvalidValue (nothing launched). Returns the launch's
/// cudaError_t.
int fp8_gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                           const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk = {});
int fp8_gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                               void* act, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

}  // namespace actorserve::gpu::cuda
