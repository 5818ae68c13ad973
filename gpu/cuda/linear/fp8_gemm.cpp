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

/// The scales of one activation row of k elements: one per 128-element group (block-scaled
/// weights), else one for the row.
size_t act_scale_groups(int k, bool block) { return block ? fp8_blocks(size_t(k)) : 1; }

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
  // fp8_gemm_block_tail_rows more rows than asked: a padded block-scaled run quantizes its last
  // rows again behind the others. One scale per row, or per 128-element group of a row
  // (block-scaled). Zeroed once, so the padding rows a run leaves unwritten hold finite codes and
  // scales (their output rows are dropped).
  const size_t padded_rows = size_t(rows) + fp8_gemm_block_tail_rows;
  const size_t groups = act_scale_groups(cols, true);
  AS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&act_q_), padded_rows * cols));
  AS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&act_scale_), padded_rows * groups * sizeof(float)));
  AS_CUDA_TRY(cudaMemsetAsync(act_q_, 0, padded_rows * cols, stream_));
  AS_CUDA_TRY(cudaMemsetAsync(act_scale_, 0, padded_rows * groups * sizeof(float), stream_));
  rows_ = rows;
  cols_ = cols;
  return {};
}

bool fp8_gemm::supported(const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n, const void* y,
                         fp8_scale_mode mode) const {
  // Block-scaled runs may quantize up to fp8_gemm_block_tail_rows rows past m: rows of at most cols_.
  const bool block_ok = mode != fp8_scale_mode::block128 || (k % fp8_gemm_block_k_multiple == 0 && k <= cols_);
  return impl_->handle != nullptr && m >= 1 && m <= rows_ && size_t(m) * size_t(k) <= size_t(rows_) * cols_ &&
         k > 0 && k % fp8_gemm_k_multiple == 0 && n > 0 && n % fp8_gemm_n_multiple == 0 && block_ok &&
         aligned16(x) && aligned16(q) && aligned16(w_scale) && aligned16(y) && fp8_quantize_activations_supported(x, k);
}

result<bool> fp8_gemm::usable(const problem& pr, int cols) {
  auto found = impl_->plan(pr.dt, pr.y_f32, pr.beta != 0.0f, pr.block, pr.n, pr.k, cols, pr.w_scale, act_scale_);
  if (!found) return found.err();
  return (*found)->usable;
}

status fp8_gemm::quantize(const problem& pr, const void* x, int m, int code_row, int stride) {
  const size_t groups = act_scale_groups(pr.k, pr.block);
  AS_CUDA_TRY(fp8_quantize_activations(pr.dt, x, m, pr.k, act_q_ + size_t(code_row) * pr.k,
                                       act_scale_ + size_t(code_row) * groups, stream_,
                                       pr.block ? fp8_act_scales::per_128 : fp8_act_scales::per_token, stride));
  return {};
}

result<bool> fp8_gemm::multiply(const problem& pr, int code_row, int cols, void* out) {
  const size_t groups = act_scale_groups(pr.k, pr.block);
  const uint8_t* codes = act_q_ + size_t(code_row) * pr.k;
  const void* b_scale = act_scale_ + size_t(code_row) * groups;
  auto found = impl_->plan(pr.dt, pr.y_f32, pr.beta != 0.0f, pr.block, pr.n, pr.k, cols, pr.w_scale, b_scale);
  if (!found) return found.err();
  fp8_plan& p = **found;
  if (!p.usable) return false;
  const uint64_t c = uint64_t(cols);
  AS_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof(c)));
  AS_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(p.c, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof(c)));
  if (auto st = impl::set_scales(p, pr.w_scale, b_scale); !st) return st.err();
  const float alpha = 1.0f;
  const auto matmul = [&](const cublasLtMatmulAlgo_t* algo) {
    return cublasLtMatmul(impl_->handle, p.desc, &alpha, pr.q, p.a, codes, p.b, &pr.beta, out, p.c, out, p.c, algo,
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
      p.usable = false;  // the activation codes written before are left unused
      return false;
    }
  }
  AS_CUBLAS_TRY(st);
  return true;
}

result<bool> fp8_gemm::run(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* w_scale, int n,
                           void* y, bool y_f32, float beta, fp8_scale_mode mode) {
  const problem pr{.dt = dt, .k = k, .q = q, .w_scale = w_scale, .n = n, .y_f32 = y_f32, .beta = beta,
                   .block = mode == fp8_scale_mode::block128};
  if (pr.block && m % fp8_gemm_block_rows != 0) {
    auto ran = run_padded(pr, x, m, y);
    if (ran && *ran) ++runs_;
    return ran;
  }
  auto ok = usable(pr, m);
  if (!ok || !*ok) return ok;
  // Block-scaled: the group scales [k / 128][m], each group's m rows contiguous.
  if (auto st = quantize(pr, x, m, 0, m); !st) return st.err();
  auto ran = multiply(pr, 0, m, y);
  if (ran && *ran) ++runs_;
  return ran;
}

result<bool> fp8_gemm::run_padded(const problem& pr, const void* x, int m, void* y) {
  constexpr int R = fp8_gemm_block_rows, T = fp8_gemm_block_tail_rows;
  const size_t row_bytes = size_t(pr.n) * (pr.y_f32 ? sizeof(float) : act_size(pr.dt));
  const size_t x_row_bytes = size_t(pr.k) * act_size(pr.dt);
  const int padded = (m + R - 1) / R * R, head = m - m % R, tail = m % R;
  auto* pad = static_cast<uint8_t*>(pad_);
  auto* out = static_cast<uint8_t*>(y);
  // The padded pass copies m output rows back (and in, with beta); the split pass reads the weight
  // a second time instead: the padded one while its copies cost less than that read.
  const size_t copies = pr.beta != 0.0f ? 2 : 1;
  const bool padded_fits = size_t(padded) * row_bytes <= pad_bytes_;
  const bool split_fits = m >= T && size_t(T) * row_bytes <= pad_bytes_;
  const bool copies_cheaper = copies * size_t(m) * row_bytes <= size_t(pr.n) * size_t(pr.k);
  if (padded_fits && (copies_cheaper || !split_fits)) {
    // One pass of `padded` rows into the pad scratch (the codes' padding rows hold earlier, finite
    // codes: their output rows are dropped), then Y takes its m rows; beta reads them from Y first.
    auto ok = usable(pr, padded);
    if (!ok || !*ok) return ok;
    if (pr.beta != 0.0f) AS_CUDA_TRY(cudaMemcpyAsync(pad, y, size_t(m) * row_bytes, cudaMemcpyDeviceToDevice, stream_));
    if (auto st = quantize(pr, x, m, 0, padded); !st) return st.err();
    auto ran = multiply(pr, 0, padded, pad);
    if (!ran || !*ran) return ran;
    AS_CUDA_TRY(cudaMemcpyAsync(y, pad, size_t(m) * row_bytes, cudaMemcpyDeviceToDevice, stream_));
    return true;
  }
  if (!split_fits) return false;
  // The last T rows (codes behind the head's) into the pad scratch first, so that a refusal leaves
  // Y untouched; then the head straight into Y; then Y's last `tail` rows from the pad scratch.
  // With beta the pad scratch starts from Y's last T rows, none of which the head's pass has
  // changed among the `tail` rows Y takes back.
  auto ok = usable(pr, T);
  if (!ok || !*ok) return ok;
  ok = usable(pr, head);
  if (!ok || !*ok) return ok;
  if (pr.beta != 0.0f)
    AS_CUDA_TRY(cudaMemcpyAsync(pad, out + size_t(m - T) * row_bytes, size_t(T) * row_bytes,
                                cudaMemcpyDeviceToDevice, stream_));
  if (auto st = quantize(pr, static_cast<const uint8_t*>(x) + size_t(m - T) * x_row_bytes, T, head, T); !st)
    return st.err();
  auto ran = multiply(pr, head, T, pad);
  if (!ran || !*ran) return ran;
  if (auto st = quantize(pr, x, head, 0, head); !st) return st.err();
  ran = multiply(pr, 0, head, y);
  if (!ran || !*ran) return ran;
  AS_CUDA_TRY(cudaMemcpyAsync(out + size_t(head) * row_bytes, pad + size_t(T - tail) * row_bytes,
                              size_t(tail) * row_bytes, cudaMemcpyDeviceToDevice, stream_));
  return true;
}

}  // namespace actorserve::gpu::cuda
