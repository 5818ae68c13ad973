#pragma once
/// FP8 tensor-core GEMM through cuBLASLt for E4M3 weights with one fp32 scale per output row:
/// the activations are quantized per token (fp8_quantize_activations) into a scratch reserved at
/// start, and cuBLASLt multiplies the two E4M3 matrices with fp32 accumulation, applying both
/// scale vectors in its epilogue (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B):
///   Y[i][j] = sx[i] x sw[j] x sum_c e4m3(Xq[i][c]) e4m3(Q[j][c]) + beta Y[i][j].
/// Block-scaled weights (fp8_scale_mode::block128): the activations are quantized per 128-element
/// group of a row and cuBLASLt applies the group and weight-block scales per 128-wide k-block
/// (VEC128_32F on B, BLK128x128_32F on A; the weight's scales as the checkpoint stores them,
/// [ceil(n/128)][k/128] row-major, and the activations' as [k/128][m], a group's rows contiguous).
/// Each shape's descriptors and algorithm are made once (one heuristic query per shape and
/// power-of-two bucket of m; each run sets its row count on the cached layouts), so a run
/// allocates nothing and can be captured in a CUDA graph.
/// Plain C++ interface (no device code, no cuBLASLt types).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "config/error.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"

namespace actorserve::gpu::cuda {

/// Alignment cuBLASLt's FP8 kernels need: k (the leading dimension of both E4M3 operands, which
/// must be laid out TN) a multiple of 16; n a multiple of 16 so that every output row starts on a
/// 16-byte boundary in bf16/fp16 and fp32; x, Q and Y 16-byte aligned.
inline constexpr int fp8_gemm_k_multiple = 16;
inline constexpr int fp8_gemm_n_multiple = 16;
/// Block-scaled weights also need k a multiple of 512 (whole 128-blocks, and the scale rows'
/// k/128 blocks a multiple of 4, the scale tensors' alignment); other shapes take the caller's
/// fall-back. cuBLASLt multiplies them only in whole groups of 4 activation rows (its VEC128
/// scales; an H100 refused every other m), so a run of m % 4 != 0 rows is padded: round_up(m, 4)
/// rows into the pad scratch (set_pad_scratch), then Y takes its m rows; or, for many rows (the
/// copy would cost more than a second pass over the weight) or more than the scratch holds, the
/// first m - m % 4 rows straight into Y and a second pass over the last
/// fp8_gemm_block_tail_rows rows into the pad scratch, of which Y takes the last m % 4 (32 rows:
/// the smallest count cuBLASLt's heuristic answered for at every shape measured; 4 to 16 rows got
/// no algorithm at some).
inline constexpr int fp8_gemm_block_k_multiple = 512;
inline constexpr int fp8_gemm_block_rows = 4;
inline constexpr int fp8_gemm_block_tail_rows = 32;

class fp8_gemm {
 public:
  fp8_gemm();
  fp8_gemm(const fp8_gemm&) = delete;
  fp8_gemm& operator=(const fp8_gemm&) = delete;
  ~fp8_gemm();

  /// Creates the cuBLASLt handle; `workspace` (device, `workspace_bytes`) is used on `stream` only.
  status init(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  /// Allocates the activation codes and scales for up to `rows` activation rows of up to `cols`
  /// elements ((rows + fp8_gemm_block_tail_rows) x cols bytes and as many rows of ceil(cols/128)
  /// floats: a padded block-scaled run's extra rows); a smaller request keeps what is there.
  status reserve(int rows, int cols);
  /// Device memory (`bytes`) the block-scaled runs of m % 4 != 0 rows write their padded rows
  /// into (gemm_runner lends its dequantization scratch: a run uses one or the other). Without
  /// room for 4 output rows such runs are refused (run() returns false).
  void set_pad_scratch(void* pad, size_t bytes) {
    pad_ = pad;
    pad_bytes_ = bytes;
  }
  /// Whether run() can take these operands: the alignment above, and m x k within the reserve.
  bool supported(const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n, const void* y,
                 fp8_scale_mode mode = fp8_scale_mode::per_row) const;
  /// Y[m][n] = (per-token e4m3(X) x sx) * (e4m3(Q) x sw)^T + beta * Y, fp32 accumulation; Y is fp32
  /// (`y_f32`, beta allowed) or dt (beta must be 0). Requires supported(). Returns true when cuBLASLt
  /// ran it, false when cuBLASLt has no algorithm for the shape (remembered: later runs of the
  /// shape return false at once and enqueue nothing; the run that finds it out leaves its
  /// activation quantization enqueued), an error when a launch fails.
  result<bool> run(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n, void* y,
                   bool y_f32, float beta, fp8_scale_mode mode = fp8_scale_mode::per_row);
  /// Runs cuBLASLt has taken (counted on the host when enqueued, so also while a graph is captured).
  int64_t runs() const { return runs_; }

 private:
  struct impl;
  /// One run's operands but the activations: what every cuBLASLt pass of the run shares.
  struct problem {
    act_dtype dt;
    int k;
    const uint8_t* q;
    const float* w_scale;
    int n;
    bool y_f32;
    float beta;
    bool block;
  };
  /// Whether the plan for `cols` activation rows has an algorithm (made on first use).
  result<bool> usable(const problem& pr, int cols);
  /// The activations' codes into act_q_ + code_row rows (scales at act_scale_ + code_row x groups,
  /// `stride` apart between groups when block-scaled).
  status quantize(const problem& pr, const void* x, int m, int code_row, int stride);
  /// One cuBLASLt pass over `cols` rows of codes from `code_row` into `out` (ld n); false when
  /// cuBLASLt refuses it (remembered for the plan).
  result<bool> multiply(const problem& pr, int code_row, int cols, void* out);
  /// A block-scaled run of m % 4 != 0 rows (fp8_gemm_block_rows above).
  result<bool> run_padded(const problem& pr, const void* x, int m, void* y);
  std::unique_ptr<impl> impl_;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  uint8_t* act_q_ = nullptr;
  float* act_scale_ = nullptr;
  int rows_ = 0, cols_ = 0;
  void* pad_ = nullptr;
  size_t pad_bytes_ = 0;
  int64_t runs_ = 0;
};

}  // namespace actorserve::gpu::cuda
