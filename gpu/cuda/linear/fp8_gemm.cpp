#include "gpu/cuda/linear/fp8_gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"

namespace actorserve::gpu::cuda {
namespace {

/// cuBLASLt's FP8 fast accumulation adds the tensor-core partial products without promoting them
/// to full fp32 every few k-steps; off, the accumulation is fp32 as in the bf16 GEMMs, which is
/// what the tests' fp32-accumulation tolerance and the CPU reference comparisons assume.
inline constexpr int8_t kFastAccum = 0;

/// The heuristic is asked once per shape for m rounded up to a power of two (at least this), and
/// its algorithm runs every m of that bucket: a tile configuration covers any smaller m, and a
/// split-k workspace for the bucket's m covers the smaller ones.
inline constexpr int kMinBucket = 16;

int bucket_of(int m) { return std::max(kMinBucket, int(std::bit_ceil(unsigned(m)))); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

/// One shape's descriptors: op(A) = Q^T over the weight [n][k] (column-major k x n, TN), B = the
/// quantized activations (column-major k x m), C = D = Y (column-major n x m, i.e. row-major [m][n]).
struct fp8_plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
  ~fp8_plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct fp8_gemm::impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  /// (dt, fp32 output, beta != 0, block scales, n, k, bucket of m) -> plan
  std::map<std::tuple<int, bool, bool, bool, int, int, int>, std::unique_ptr<fp8_plan>> plans;
  ~impl() {
    plans.clear();
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (handle) cublasLtDestroy(handle);
  }

  static status set_scales(fp8_plan& p, const void* a_scale, const void* b_scale) {
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                 sizeof(a_scale)));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                 sizeof(b_scale)));
    return {};
  }

  /// The heuristic's first algorithm for the plan's layouts as they are set now.
  bool query(fp8_plan& p) const {
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &r, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found < 1 || r.state != CUBLAS_STATUS_SUCCESS)
      return false;
    p.algo = r.algo;
    return true;
  }

  /// The shape's plan, made (and its algorithm asked for) on first use with the scale vectors set.
  result<fp8_plan*> plan(act_dtype dt, bool y_f32, bool beta, bool block, int n, int k, int m, const void* a_scale,
                         const void* b_scale) {
    const int bucket = bucket_of(m);
    auto& slot = plans[{int(dt), y_f32, beta, block, n, k, bucket}];
    if (slot) return slot.get();
    auto p = std::make_unique<fp8_plan>();
    const cudaDataType_t out = y_f32 ? CUDA_R_32F : dt == act_dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    // Per-row weights: both scale vectors in the epilogue. Block-scaled weights: one scale per
    // 128 x 128 weight block and per 128-element group of an activation row, applied per k-block.
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const int32_t a_mode = block ? int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) : outer;
    const int32_t b_mode = block ? int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) : outer;
    AS_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &kFastAccum,
                                                 sizeof(kFastAccum)));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
    AS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
    if (auto st = set_scales(*p, a_scale, b_scale); !st) return st.err();
    AS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), int64_t(k)));
    AS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(bucket), int64_t(k)));
    AS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->c, out, uint64_t(n), uint64_t(bucket), int64_t(n)));
    p->usable = query(*p);
    slot = std::move(p);
    return slot.get();
  }
};

fp8_gemm::fp8_gemm() : impl_(std::make_unique<impl>()) {}

fp8_gemm::~fp8_gemm() {
  impl_.reset();
  if (act_q_) cudaFree(act_q_);
  if (act_scale_) cudaFree(act_scale_);
}

status fp8_gemm::init(cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  stream_ = stream;
  workspace_ = workspace;
  workspace_bytes_ = workspace_bytes;
  AS_CUBLAS_TRY(cublasLtCreate(&impl_->handle));
  AS_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&impl_->pref));
  const uint64_t bytes = workspace_bytes;
  AS_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(impl_->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                     sizeof(bytes)));
  return {};
}

status fp8_gemm::reserve(int rows, int cols) {
  if (rows <= 0 || cols <= 0 || (size_t(rows) <= size_t(rows_) && size_t(rows) * cols <= size_t(rows_) * cols_))
    return {};
  if (act_q_) cudaFree(act_q_);
  if (act_scale_) cudaFree(act_scale_);
  act_q_ = nullptr;
  act_scale_ = nullptr;
  rows_ = cols_ = 0;
  AS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&act_q_), size_t(rows) * cols));
  // One scale per row, or per 128-element group of a row (block-scaled weights).
  const size_t groups = (size_t(cols) + kFp8Block - 1) / kFp8Block;
  AS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&act_scale_), size_t(rows) * groups * sizeof(float)));
  rows_ = rows;
  cols_ = cols;
  return {};
}

bool fp8_gemm::supported(const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n, const void* y,
                         fp8_scale_mode mode) const {
  const bool block_ok = mode != fp8_scale_mode::block128 ||
                        (k % fp8_gemm_block_k_multiple == 0 && m % fp8_gemm_block_m_multiple == 0);
  return impl_->handle != nullptr && m >= 1 && m <= rows_ && size_t(m) * size_t(k) <= size_t(rows_) * cols_ &&
         k > 0 && k % fp8_gemm_k_multiple == 0 && n > 0 && n % fp8_gemm_n_multiple == 0 && block_ok &&
         aligned16(x) && aligned16(q) && aligned16(w_scale) && aligned16(y) && fp8_quantize_activations_supported(x, k);
}

result<bool> fp8_gemm::run(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n,
                           void* y, bool y_f32, float beta, fp8_scale_mode mode) {
  const void* a_scale = w_scale;
  const void* b_scale = act_scale_;
  const bool block = mode == fp8_scale_mode::block128;
  auto found = impl_->plan(dt, y_f32, beta != 0.0f, block, n, k, m, a_scale, b_scale);
  if (!found) return found.err();
  fp8_plan& p = **found;
  if (!p.usable) return false;
  const uint64_t cols = uint64_t(m);
  AS_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  AS_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(p.c, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  if (auto st = impl::set_scales(p, a_scale, b_scale); !st) return st.err();
  // Block-scaled: the group scales [k / 128][m], each group's m rows contiguous.
  AS_CUDA_TRY(fp8_quantize_activations(dt, x, m, k, act_q_, act_scale_, stream_,
                                       block ? fp8_act_scales::per_128 : fp8_act_scales::per_token, m));
  const float alpha = 1.0f;
  const auto matmul = [&](const cublasLtMatmulAlgo_t* algo) {
    return cublasLtMatmul(impl_->handle, p.desc, &alpha, q, p.a, act_q_, p.b, &beta, y, p.c, y, p.c, algo,
                          workspace_, workspace_bytes_, stream_);
  };
  cublasStatus_t st = matmul(&p.algo);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    // The bucket's algorithm refused this m: ask the heuristic for exactly this m, this time only.
    cublasLtMatmulHeuristicResult_t r{};
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(impl_->handle, p.desc, p.a, p.b, p.c, p.c, impl_->pref, 1, &r, &got) ==
            CUBLAS_STATUS_SUCCESS &&
        got >= 1)
      st = matmul(&r.algo);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
      p.usable = false;  // the activation codes written above are left unused
      return false;
    }
  }
  AS_CUBLAS_TRY(st);
  ++runs_;
  return true;
}

}  // namespace actorserve::gpu::cuda
