#pragma once
/// Fused one-token GEMVs (m = 1; cuda_tuning::fused_decode) over FP8 E4M3 weights with one fp32
/// scale per output row (fp8_linear.hpp, fp8_scale_mode::per_row), each replacing fp8_gemv and the
/// element-wise kernel after it, as gemv_kernel.hpp's gemv_qkv_rope and gemv_gate_up_silu do for
/// 16-bit weights. Each row's projection is fp8_gemv's fp32 value, bit for bit (the same loads,
/// fmas, reduction and one product with the row's scale), and the epilogue is the 16-bit GEMVs'
/// (gemv_epilogue.cuh): the outputs equal the unfused pair's bit for bit. Block-scaled weights
/// (fp8_scale_mode::block128) have no fused form. Each launches as a programmatic dependent and
/// runs on the bulk-copy ring (fp8_gemv_bulk.hpp, groups of bulk.fp8_rows rows) where `bulk` says
/// so: bulk.fp8 and bulk.qkv (bulk.gate_up), on a GPU and code that run it
/// (fp8_gemv_bulk_supported); else in registers, a block a rotary pair (QKV) or rows_per_block
/// rows (gate/up). So `--bulk-gemv plain,fp8` keeps the plain FP8 GEMVs on the ring and runs these
/// in registers. Operands fp8_gemv_supported(x, 1, k, q) refuses return cudaErrorInvalidValue
/// (nothing launched).
/// Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// The QKV projection of token 0 (q: [(H + 2*KVH) * D][k] codes, scale: [(H + 2*KVH) * D])
/// followed by rope_kv_write(a) with a.n = 1: a.qkv receives the rotated q (and k, v as
/// projected); k and v go to the paged cache, 16-bit or (a.kv_fp8) E4M3.
int fp8_gemv_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                      const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

/// The gate/up projection (q: [2 * inter][k] codes, gate rows first; scale: [2 * inter]) followed
/// by silu_and_mul: act[j] = silu(gate_j) * up_j in dt. rows_per_block: 2 or 4 weight rows per
/// block of the register kernel (the ring's groups are bulk.fp8_rows rows).
int fp8_gemv_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                          void* act, int rows_per_block, cudaStream_t s, const bulk_gemv_tuning& bulk = {});

}  // namespace actorserve::gpu::cuda
