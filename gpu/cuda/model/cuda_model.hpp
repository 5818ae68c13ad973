#pragma once
/// The model on the device: weights converted once to bf16/fp16 (Q/K/V and gate/up fused into
/// one matrix each), or kept as FP8 E4M3 with per-row or 128 x 128 block scales where the
/// checkpoint stores the dense layers so; norms, biases and rope frequencies in fp32; and the GEMM runner.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_gemm.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/mla/mla_attention.hpp"
#include "gpu/cuda/moe/moe_ffn.hpp"
#include "gpu/cuda/tuning.hpp"
#include "gpu/model/dummy_weights.hpp"
#include "gpu/model/shard_plan.hpp"

namespace actorserve::gpu::cuda {

/// A linear layer's weight [n][k]: act-dtype elements, or FP8 E4M3 bytes with one fp32 scale per
/// output row (a per-tensor scale repeated on its rows) or per 128 x 128 block.
struct device_weight {
  void* data = nullptr;
  float* row_scale = nullptr;    ///< [n]; non-null: `data` holds E4M3 bytes with row scales
  float* block_scale = nullptr;  ///< [ceil(n/128)][ceil(k/128)]; non-null: E4M3 bytes with block scales
  bool fp8() const { return row_scale != nullptr || block_scale != nullptr; }
  bool block_scaled() const { return block_scale != nullptr; }
  /// An FP8 weight's scales and how they apply.
  const float* scales() const { return block_scaled() ? block_scale : row_scale; }
  fp8_scale_mode scale_mode() const { return block_scaled() ? fp8_scale_mode::block128 : fp8_scale_mode::per_row; }
};

/// One decoder layer. A sparse layer has `experts` (its router set) in place of gate_up / down; a
/// latent-attention layer (DeepSeek-V2) has `mla` (its kv_b_proj set) in place of qkv.
struct device_layer {
  device_weight qkv;            ///< [(H + 2*KVH) * D][hidden]
  device_mla mla;               ///< a latent-attention layer's projections (act dtype)
  float* qkv_bias = nullptr;    ///< [(H + 2*KVH) * D] or null
  device_weight o;              ///< [hidden][H * D] (latent attention: [hidden][H * v_head_dim])
  float* o_bias = nullptr;      ///< [hidden] or null; whole on every shard (added after the all-reduce)
  device_weight gate_up;        ///< [2 * inter][hidden], gate rows first; null in a sparse layer
  device_weight down;           ///< [hidden][inter]; null in a sparse layer
  device_experts experts;       ///< a sparse layer's router and experts
  float* input_norm = nullptr;  ///< [hidden]
  float* post_norm = nullptr;   ///< [hidden]
  float* q_norm = nullptr;      ///< [D] or null: RMSNorm weights of each q head (Qwen3)
  float* k_norm = nullptr;      ///< [D] or null: of each k head
  /// The checkpoint's self_attn.k_scale / v_scale (1.0 when absent): an FP8 KV cache holds the
  /// E4M3 codes of K / k_scale and V / v_scale (--kv-cache-dtype fp8).
  float k_scale = 1.0f, v_scale = 1.0f;
};

class device_model {
 public:
  device_model() = default;
  device_model(const device_model&) = delete;
  device_model& operator=(const device_model&) = delete;
  ~device_model();

  /// This shard's view of the model (shard_plan::shard_config): its heads, KV heads,
  /// intermediate sizes and vocabulary slice; the whole model's config at one shard.
  model_config cfg;
  /// The split over --tensor-parallel-size shards (one shard: the whole model) and this shard's rank.
  std::optional<shard_plan> plan;
  int rank = 0;
  act_dtype dt = act_dtype::bf16;
  void* embed = nullptr;        ///< [whole vocab][hidden]: replicated on every shard
  void* lm_head = nullptr;      ///< [cfg.vocab_size][hidden], the shard's vocabulary rows; inside embed when tied
  float* final_norm = nullptr;
  float* inv_freq = nullptr;    ///< [head_dim / 2] (MLA: [qk_rope_head_dim / 2])
  /// What rope multiplies cos and sin with: YaRN's attention factor, 1 for the other rope kinds.
  float rope_attention_factor = 1.0f;
  std::vector<device_layer> layers;
  size_t bytes = 0;             ///< device memory held
  /// Elements of the largest FP8 weight (0: none): the act-dtype scratch gemm_runner dequantizes
  /// an FP8 weight into for batches past the FP8 GEMV.
  size_t fp8_max_elements = 0;
  /// The longest FP8 weight row (its k): the width of the FP8 GEMM's activation codes.
  size_t fp8_max_cols = 0;
  bool has_fp8() const { return fp8_max_elements > 0; }

  /// cudaMalloc tracked for release; counts `bytes`.
  status alloc(void** ptr, size_t n);

 private:
  std::vector<void*> allocations_;
};

/// Which activation dtype a --dtype choice means for a checkpoint of `torch_dtype`.
result<act_dtype> resolve_dtype(dtype_choice choice, const std::string& torch_dtype);

/// Maps the checkpoint, converts and uploads every weight (synchronously, at start-up), logging
/// progress. Sparse layers' experts are stacked into one matrix each (device_experts). FP8
/// checkpoints: dense layers' per-tensor and per-channel E4M3 weights stay E4M3 on the device
/// with row scales, and block-scaled ones with their 128 x 128 block scales (device_weight), a
/// fused matrix (QKV, gate/up) where each part but the last ends on a block row; other fused
/// block-scaled matrices, experts, latent-attention projections (device_mla) and any matrix
/// mixing FP8 and float parts are dequantized on the host and stored in the activation dtype.
/// `quantize_fp8` (--quantization fp8): dense layers' float weights are rounded to E4M3 with one
/// scale per output row on the device (fp8_quantize_rows), as quantize_rows_e4m3 rounds them on
/// the CPU, and stored so; generated ones (`source`, --load-format dummy) are filled on
/// the device first and rounded the same way. Tensor parallel (`num_shards` > 1): the shard
/// `rank`'s slices (cut_shard_views; a slice that cuts an FP8 scale block is refused naming
/// --tensor-parallel-size), its config, the whole embedding table (replicated: every shard embeds
/// every token, no exchange) and o_proj's whole bias on every shard.
result<std::unique_ptr<device_model>> load_device_model(const std::string& model_dir, dtype_choice choice,
                                                        bool quantize_fp8, cudaStream_t stream,
                                                        const weight_source& source = {}, int rank = 0,
                                                        int num_shards = 1);

/// Row counts up to which gemm_runner uses the hand-written GEMV (gemv_kernel.hpp) rather than
/// cuBLAS by default: at m = 1 the GEMV launched programmatically ties or beats cuBLAS on every
/// Llama-3-8B projection; from m = 2 cuBLAS is as fast or faster (docs/attention.md, Decisions).
inline constexpr int default_gemv_max_rows = 1;

/// Row count from which gemm_runner::run multiplies an FP8 weight with the FP8 tensor-core GEMM
/// (fp8_gemm.hpp) rather than the FP8 GEMV (which reaches fp8_gemv_max_m rows). On an H100 the
/// GEMM is faster from 5 rows summed over Llama-3-8B's four projections (bench/results/fp8.md,
/// `bench_cuda_kernels --only fp8`: 133.7 against 152.7 µs at 5 rows, the GEMV ahead at 4).
inline constexpr int default_fp8_gemm_min_rows = 5;
static_assert(default_fp8_gemm_min_rows <= fp8_gemv_max_m + 1, "no row count may fall between the GEMV and the GEMM");

/// Whether gemm_runner::run takes an FP8 weight through the FP8 GEMV at m rows by default
/// (where the GEMV supports the operands).
constexpr bool fp8_gemv_by_default(int m) { return m < default_fp8_gemm_min_rows && m <= fp8_gemv_max_m; }

/// Y[m, n] (fp32) = X[m, k] (dt) * W[n, k]^T (dt) + beta * Y, fp32 accumulation, on one stream.
/// Small m goes to the bandwidth-bound GEMV where it supports the operands, the rest to cuBLAS.
class gemm_runner {
 public:
  gemm_runner() = default;
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;
  ~gemm_runner();
  status init(cudaStream_t stream, size_t workspace_bytes);
  status run(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta = 0.0f);
  /// Y[m, n] (dt) = X * W^T, fp32 accumulation rounded once to dt; always cuBLAS. For outputs an
  /// element-wise kernel consumes (gate_up -> SiLU): half the bytes written and read of fp32.
  status run_act(act_dtype dt, const void* x, int m, int k, const void* w, int n, void* y);
  /// run() and run_act() for a layer's weight: an act-dtype one as above. An FP8 one: run() takes
  /// the FP8 GEMV (fp8_linear.hpp) for m below the FP8 GEMM's first row count and up to
  /// fp8_gemv_max_m rows where the GEMV supports the operands (at m = 1 its bulk-copy form,
  /// fp8_gemv_bulk.hpp, where bulk_gemv().fp8 says so and the GPU runs it: the same bits); run()
  /// from that row count and
  /// run_act() at every m take the FP8 GEMM (fp8_gemm.hpp: the activations quantized per token,
  /// cuBLASLt on the tensor cores) where it supports the operands; the rest (k or n not a multiple
  /// of 16, misaligned pointers, more rows than reserve_fp8_activations reserved, or a shape
  /// cuBLASLt has no FP8 algorithm for) dequantize the weight into the scratch reserved by
  /// reserve_fp8_scratch and run cuBLAS on it. A block-scaled FP8 weight takes the same paths with
  /// its block scales: the block-scaled GEMV, the FP8 GEMM with activations quantized per
  /// 128-element group (cuBLASLt's block-scaled modes, where k % 512 == 0 and the heuristic
  /// returns an algorithm; rows padded to whole groups of 4 through the dequantization scratch,
  /// fp8_gemm.hpp), else dequantize + cuBLAS.
  status run(act_dtype dt, const void* x, int m, int k, const device_weight& w, int n, float* y, float beta = 0.0f);
  status run_act(act_dtype dt, const void* x, int m, int k, const device_weight& w, int n, void* y);
  /// Allocates the dequantization scratch for FP8 weights of up to `elements` (none for 0).
  status reserve_fp8_scratch(act_dtype dt, size_t elements);
  /// For each of `batch` products (row-major, 16-bit operands, fp32 accumulation; strides in
  /// elements): C_i[m][n] = A_i[m][k] * B_i, A_i at a + i * stride_a with rows lda apart, B_i
  /// [k][n] (b_rows_are_n false) or [n][k] (true: B_i^T is used) with rows ldb apart, C_i fp32
  /// (c_f32) or dt with rows ldc apart. Always cuBLAS (strided-batched).
  status run_batched(act_dtype dt, int batch, int m, int n, int k, const void* a, int lda, long long stride_a,
                     const void* b, bool b_rows_are_n, int ldb, long long stride_b, void* c, bool c_f32, int ldc,
                     long long stride_c);
  /// Allocates the FP8 GEMM's per-token activation codes and scales for up to `rows` rows of up to
  /// `cols` elements (none for 0). Needs init() first.
  status reserve_fp8_activations(int rows, int cols) { return fp8_gemm_.reserve(rows, cols); }
  /// FP8 weights: the GEMV for m <= rows (capped at fp8_gemv_max_m; 0: never) and the FP8 GEMM
  /// from `gemm_min_rows` (INT_MAX: never, leaving dequantize + cuBLAS); for benchmarks and tests.
  void set_fp8_paths(int gemv_max_rows, int gemm_min_rows) {
    fp8_gemv_max_rows_ = gemv_max_rows;
    fp8_gemm_min_rows_ = gemm_min_rows;
  }
  /// FP8 GEMMs run through cuBLASLt so far (counted when enqueued, also while capturing a graph).
  int64_t fp8_gemm_runs() const { return fp8_gemm_.runs(); }
  /// FP8 weights dequantized into the scratch for cuBLAS so far (counted when enqueued).
  int64_t fp8_dequantize_runs() const { return fp8_dequantize_runs_; }
  /// One-token FP8 GEMVs run on the bulk-copy ring so far (fp8_gemv_bulk.hpp; counted when enqueued).
  int64_t fp8_gemv_bulk_runs() const { return fp8_gemv_bulk_runs_; }
  /// FP8 GEMVs run on the tensor cores so far (fp8_gemv_mma.hpp; counted when enqueued).
  int64_t fp8_gemv_mma_runs() const { return fp8_gemv_mma_runs_; }
  /// Whether run() takes the GEMV for m rows (its output then stays fp32 for the fused paths).
  bool uses_gemv(int m) const { return m <= gemv_max_rows_; }
  /// Uses the GEMV for m <= rows (0: always cuBLAS); for benchmarks and tests.
  void set_gemv_max_rows(int rows) { gemv_max_rows_ = rows; }
  /// Weight rows per GEMV block for m <= 2 (1, 2 or 4; 0: 2 where 4 would leave a partial second
  /// wave of blocks, else 4).
  void set_gemv_rows_per_block(int rows) { gemv_rows_per_block_ = rows; }
  /// Weight rows per GEMV block it uses at m = 1 for n output rows (2 or 4).
  int gemv_rows_for(int n) const;
  /// Which one-token GEMVs run on the bulk-copy path, and its grid (gemv_bulk.hpp, and
  /// fp8_gemv_bulk.hpp for FP8 weights at m = 1).
  void set_bulk_gemv(const bulk_gemv_tuning& bulk) { bulk_ = bulk; }
  const bulk_gemv_tuning& bulk_gemv() const { return bulk_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int gemv_max_rows_ = default_gemv_max_rows;
  int gemv_rows_per_block_ = 0;
  bulk_gemv_tuning bulk_;
  int num_sms_ = 132;
  void* workspace_ = nullptr;
  void* fp8_scratch_ = nullptr;
  size_t fp8_scratch_elements_ = 0;
  fp8_gemm fp8_gemm_;
  int fp8_gemv_max_rows_ = fp8_gemv_max_m;
  int fp8_gemm_min_rows_ = default_fp8_gemm_min_rows;
  int64_t fp8_dequantize_runs_ = 0;
  int64_t fp8_gemv_bulk_runs_ = 0;
  int64_t fp8_gemv_mma_runs_ = 0;
  /// Y = X W^T + beta * Y through cuBLAS.
  status cublas(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta);
  /// The FP8 weight `w` [n][k] dequantized into the scratch (on the stream).
  result<const void*> dequantized(act_dtype dt, const device_weight& w, int n, int k);
};

}  // namespace actorserve::gpu::cuda
