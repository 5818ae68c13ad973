#pragma once
/// The FP8 GEMVs of 1 to 8 activation rows on the tensor cores: the bulk-copy ring of
/// fp8_gemv_bulk.hpp (persistent blocks on bulk_gemv_tuning's grid, one producer thread copying
/// E4M3 weight rows into shared-memory stages) with groups of 16 weight rows, each group one
/// mma.sync m16n8k16 tile: the 16 rows as M, the activation rows (tokens) as N, fp32
/// accumulation. The codes become fp16 operands by one conversion per pair (exact: every E4M3
/// value is an fp16 value); each activation row is multiplied by a power of two 2^s that brings
/// its largest |x| into [2^14, 2^15) before it is rounded to fp16 (exact for bf16 and fp16 inputs
/// down to 2^-32 of that largest value), and every output is divided by it again (exact). So each
/// output is the dot product of the exact operands accumulated in fp32, in the tile's order
/// rather than fp8_gemv's: the values agree with fp8_gemv's within fp32 accumulation error, not
/// bit for bit. A code is converted once for all the tokens (two per instruction) and an MMA
/// takes 16 x 16 codes against every token, where the CUDA-core GEMVs convert each code to fp32
/// and spend an fma per code and token: from a few tokens on those are bound by their
/// instructions (on an H100, Llama-3-8B's four projections at 8 tokens take 2.4 times their
/// one-token time there, 1.5 times here).
/// At one token the CUDA-core ring stays faster, so gemm_runner takes this from
/// bulk_gemv_tuning::fp8_mma_min_rows tokens (bench/results/fp8.md). Per-row scales only
/// (block-scaled weights take fp8_gemv and fp8_gemv_bulk).
/// Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// The most activation rows fp8_gemv_mma takes: the MMA's N.
inline constexpr int fp8_gemv_mma_max_m = 8;

/// Whether fp8_gemv_mma can run these operands on the loaded GPU and code: 1 <= m <=
/// fp8_gemv_mma_max_m and fp8_gemv_bulk_supported(x, k, q) (k a positive multiple of 16, x and q
/// 16-byte aligned, compute capability 9.x running sm_90 code).
bool fp8_gemv_mma_supported(const void* x, int m, int k, const void* q);

/// Y[m, n] (fp32) = X[m, k] (dt) * (e4m3(Q) x scale)^T + beta * Y with one scale per weight row,
/// on the grid of `bulk` (its blocks_per_sm, stages and evict_first). Launches as a programmatic
/// dependent: its blocks start copying weights before the previous kernel has finished. Operands
/// fp8_gemv_mma_supported refuses return cudaErrorInvalidValue (nothing launched). Returns the
/// launch's cudaError_t.
int fp8_gemv_mma(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* scale, int n, float* y,
                 float beta, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

/// The fused one-token GEMVs of fp8_gemv_fused.hpp on the tensor cores, groups of 8 rotary pairs
/// (QKV + rope + KV write) or 8 gate rows and their 8 up rows (gate/up + SiLU): the outputs of
/// fp8_gemv_mma (m = 1) followed by rope_kv_write or silu_and_mul, bit for bit. Operands
/// fp8_gemv_mma_supported(x, 1, k, q) refuses return cudaErrorInvalidValue (nothing launched).
int fp8_gemv_mma_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                          const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk = {});
int fp8_gemv_mma_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                              void* act, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

}  // namespace actorserve::gpu::cuda
