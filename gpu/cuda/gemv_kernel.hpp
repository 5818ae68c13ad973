#pragma once
/// Bandwidth-bound skinny GEMM for decode (a few activation rows against a large weight matrix):
/// Y[m, n] (fp32) = X[m, k] (dt) * W[n, k]^T (dt) + beta * Y, fp32 accumulation. Each thread block
/// streams a few weight rows once with 16-byte loads and applies them to every row of X, so the
/// weights are read exactly once whatever m is. Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include "gpu/cuda/kernels.hpp"

namespace actorserve::gpu::cuda {

/// The most activation rows one gemv call takes.
inline constexpr int gemv_max_m = 8;

/// Whether gemv can run these operands: 1 <= m <= gemv_max_m, k a positive multiple of 8 and x, w
/// 16-byte aligned (each row then starts on a 16-byte boundary).
bool gemv_supported(const void* x, int m, int k, const void* w);

/// Y = X W^T + beta * Y as above on `s`; requires gemv_supported. `rows_per_block` (1, 2 or 4)
/// trades blocks for accumulators; it applies to m <= 2 (larger m uses 4). Under
/// programmatic_launch() its blocks start streaming weights while the previous kernel finishes,
/// and wait for it before reading X or writing Y. Returns the launch's cudaError_t.
int gemv(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta, cudaStream_t s,
         int rows_per_block = 4);

}  // namespace actorserve::gpu::cuda
