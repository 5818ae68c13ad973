#pragma once
/// Linear layers with FP8 E4M3 weights (one byte per element) and one fp32 scale per output row,
/// W[n][k] = e4m3(Q[n][k]) x scale[n], or one per 128 x 128 block (fp8_scale_mode). Decode rows
/// take a GEMV that converts the bytes in registers; larger batches quantize the activations per
/// token (fp8_quantize_activations) for the FP8 tensor-core GEMM (fp8_gemm.hpp, per-row scales),
/// or, where that cannot run, dequantize the weight into an act-dtype scratch for cuBLAS.
/// --quantization fp8 rounds float weights to this form on the device at load.
/// Plain C++ interface (no device code).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

/// How an FP8 weight W[n][k]'s fp32 scales apply: per_row, scale[n] (W = e4m3(Q[r][c]) x
/// scale[r]); block128, 128 x 128 blocks with ragged edges (DeepSeek-V3's weight_block_size
/// [128, 128]): scale[ceil(n/128)][ceil(k/128)], W = e4m3(Q[r][c]) x scale[r/128][c/128].
enum class fp8_scale_mode { per_row, block128 };

/// The block edge of fp8_scale_mode::block128.
inline constexpr int kFp8Block = 128;

/// The 128-wide blocks that cover `n` rows or columns (the last one may be ragged).
constexpr size_t fp8_blocks(size_t n) { return (n + kFp8Block - 1) / kFp8Block; }

/// The most activation rows fp8_gemv takes at once.
inline constexpr int fp8_gemv_max_m = 8;

/// Whether fp8_gemv can run these operands: 1 <= m <= fp8_gemv_max_m, k a positive multiple of 16,
/// x and q 16-byte aligned (each weight row then starts on a 16-byte boundary).
bool fp8_gemv_supported(const void* x, int m, int k, const void* q);

/// Y[m, n] (fp32) = X[m, k] (dt) * (e4m3(Q) x scale)^T + beta * Y: each weight row's dot product
/// is accumulated in fp32 over the exact E4M3 values and multiplied by its scale once (per_row),
/// or each 16-weight partial sum is multiplied by its 128 x 128 block's scale as it joins the
/// row's fp32 sum (block128). Requires fp8_gemv_supported. Returns the launch's cudaError_t.
int fp8_gemv(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* scale, int n, float* y,
             float beta, cudaStream_t s, fp8_scale_mode mode = fp8_scale_mode::per_row);

/// out[n][k] (dt) = e4m3(Q[n][k]) x its scale (`mode`), rounded once to dt. Returns the launch's
/// cudaError_t.
int fp8_dequantize(act_dtype dt, const uint8_t* q, const float* scale, int n, int k, void* out, cudaStream_t s,
                   fp8_scale_mode mode = fp8_scale_mode::per_row);

/// Whether fp8_quantize_activations can run on x: k a positive multiple of 8, x 16-byte aligned.
bool fp8_quantize_activations_supported(const void* x, int k);

/// How fp8_quantize_activations scales: one scale per row (per_token), or one per 128-element
/// group of a row (per_128, the activations of a block-scaled FP8 GEMM; a ragged last group).
enum class fp8_act_scales { per_token, per_128 };

/// Dynamic activation quantization (vLLM's dynamic per-token scheme, or DeepSeek-V3's per-token
/// groups of 128): per_token, each of the m rows of X[m][k] (dt) gets scale[i] = amax_i / 448
/// and codes q[i][c] = e4m3(X[i][c] / scale[i]), with the rounding of fp8_quantize_rows (IEEE
/// division, ties to even, saturation, NaN -> 0x7f; NaN skipped in the amax; an all-zero row gets
/// scale 0 and codes 0), so X[i][c] ~ e4m3(q) x scale[i]; per_128, the same over each group g of
/// elements [128 g, 128 g + 128) of a row, its scale at scale[g * stride + i] (stride >= m: the
/// rows of a group are contiguous, the layout cuBLASLt's VEC128_32F mode reads). q must be 8-byte
/// aligned. Requires fp8_quantize_activations_supported. One block per row. Returns the launch's
/// cudaError_t.
int fp8_quantize_activations(act_dtype dt, const void* x, int m, int k, uint8_t* q, float* scale, cudaStream_t s,
                             fp8_act_scales mode = fp8_act_scales::per_token, int stride = 0);

/// Rounds the [rows][cols] weights at `src` (f32, bf16 or f16) to E4M3 codes `q` [rows][cols]
/// with one scale per row, bit for bit as the CPU executor's quantize_rows_e4m3 (gpu/model/fp8.hpp)
/// rounds them for --quantization fp8: scale[r] = amax_r / 448 (NaN elements skipped, as
/// std::fmax skips them) and q[r][c] = e4m3_encode(src[r][c] / scale[r]) (IEEE division, ties to
/// even, subnormal E4M3 results, saturation to +-448, NaN -> 0x7f); a row whose amax is 0 gets
/// scale 0 and codes 0. One warp per row. Returns the launch's cudaError_t.
int fp8_quantize_rows(const void* src, src_dtype sd, int rows, int cols, uint8_t* q, float* scale, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
