#pragma once
/// Bandwidth-bound skinny GEMM for decode (a few activation rows against a large weight matrix):
/// Y[m, n] (fp32) = X[m, k] (dt) * W[n, k]^T (dt) + beta * Y, fp32 accumulation. Each thread block
/// streams a few weight rows once with 16-byte loads and applies them to every row of X, so the
/// weights are read exactly once whatever m is. Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// The most activation rows one gemv call takes.
inline constexpr int gemv_max_m = 8;

/// Whether gemv can run these operands: 1 <= m <= gemv_max_m, k a positive multiple of 8 and x, w
/// 16-byte aligned (each row then starts on a 16-byte boundary).
bool gemv_supported(const void* x, int m, int k, const void* w);

/// Y = X W^T + beta * Y as above on `s`; requires gemv_supported. `rows_per_block` (1, 2 or 4)
/// trades blocks for accumulators; it applies to m <= 2 (larger m uses 4). At m = 1 with beta 0 it
/// runs gemv_bulk (gemv_bulk.hpp) where bulk.plain says so (the same results). Under
/// programmatic_launch() its blocks start streaming weights while the previous kernel finishes,
/// and wait for it before reading X or writing Y. Returns the launch's cudaError_t.
int gemv(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta, cudaStream_t s,
         int rows_per_block = 4, const bulk_gemv_tuning& bulk = {});

// Fused GEMVs for one token (m = 1; cuda_tuning::fused_decode), each replacing a projection and
// the element-wise kernel after it; operands as gemv_supported(x, 1, k, w) requires. Each computes
// the same fp32 projection values as gemv() and launches as a programmatic dependent; each runs its
// gemv_bulk.hpp counterpart where `bulk` says so.

/// The QKV projection of token 0 (w: [(H + 2*KVH) * D, k]) followed by rope_kv_write(a) with
/// a.n = 1: a.qkv receives the rotated q (and k, v as projected); k and v go to the paged cache,
/// 16-bit or (a.kv_fp8) E4M3 with a.k_scale / a.v_scale, the bits rope_kv_write writes from the
/// same projections.
int gemv_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s,
                  const bulk_gemv_tuning& bulk = {});

/// The gate/up projection (w: [2 * inter, k], gate rows first) followed by silu_and_mul: act[j] =
/// silu(gate_j) * up_j in dt. rows_per_block: 2 or 4 weight rows per block.
int gemv_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act, int rows_per_block,
                      cudaStream_t s, const bulk_gemv_tuning& bulk = {});

}  // namespace actorserve::gpu::cuda
