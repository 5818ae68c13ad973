#pragma once
/// DeepSeek-V2's multi-head latent attention on the device (docs/mla.md): the query and latent
/// projections and the latent norm, rope and cache write for every row; then a decode row (its
/// sequence brings one token) in the absorbed form: W_UK applied to each head's q_nope (one
/// strided-batched GEMM), the attention over the latent cache (mla_kernels.hpp) and W_UV applied
/// to each head's latent output (a second one), with no host round trip, so that a decode step is
/// capturable in a CUDA graph; and a prefill chunk in the up-projected form on tensor cores
/// (mla_prefill), launched per sequence from the host.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "config/error.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/mla/head_gemv.hpp"

namespace actorserve::gpu::cuda {

class gemm_runner;

/// One layer's latent-attention weights on the device, in the activation dtype (norms and
/// biases fp32). H = num_heads, qk = qk_nope_head_dim + qk_rope_head_dim.
struct device_mla {
  void* q_proj = nullptr;       ///< [H * qk][hidden]; null with q_lora
  void* q_a_proj = nullptr;     ///< [q_lora_rank][hidden]; null without q_lora
  float* q_a_bias = nullptr;    ///< [q_lora_rank] or null
  float* q_a_norm = nullptr;    ///< [q_lora_rank]
  void* q_b_proj = nullptr;     ///< [H * qk][q_lora_rank]
  /// kv_a_proj_with_mqa: [r + dr][hidden]. With q_proj, upload_mla stores it right after
  /// q_proj's rows (one [H * qk + r + dr][hidden] matrix): a one-token step projects both with
  /// one GEMV.
  void* kv_a_proj = nullptr;
  float* kv_a_bias = nullptr;   ///< [r + dr] or null
  float* kv_a_norm = nullptr;   ///< [r]
  /// [H * (dn + dv)][r]: per head W_UK (dn rows), then W_UV (dv rows). The absorbed matrices are
  /// read in place: W_UK^T and W_UV are operands of strided-batched GEMMs over the heads.
  void* kv_b_proj = nullptr;
};

/// Where one step's per-row metadata sits on the device, and how its rows divide between the
/// forms (staged by the step builder: staged_step::up_projected, absorbed_rows).
struct mla_step {
  const int32_t* positions = nullptr;     ///< [rows]
  const int32_t* slots = nullptr;         ///< [rows]: latent cache slot; negative: none
  /// [rows]: the row's sequence; negative: a padding row or a row of up_projected
  const int32_t* token_seqs = nullptr;
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
  /// Host copies of the sequences computed in the up-projected form, in row order; empty in a
  /// captured decode step.
  std::span<const attn_seq> up_projected;
  /// The absorbed form runs on rows [0, absorbed_rows): up to the last row not in up_projected.
  int absorbed_rows = 0;
};

/// The latent attention's widths: H, r, dn, dr, dv.
struct mla_dims {
  int heads = 0, rank = 0, nope_dim = 0, rope_dim = 0, v_dim = 0;
};

/// The up-projected form's buffers, planned once: `tokens` context rows, at least the longest
/// context (mla_prefill_workspace_tokens: a group of contexts, one after another).
struct mla_prefill_workspace {
  int tokens = 0;
  void* latents = nullptr;     ///< [tokens][r] of dt: the contexts' latents, gathered
  void* k = nullptr;           ///< [tokens][H][dn + dr] of dt: k_nope (kv_b_proj), then k_pe
  void* v = nullptr;           ///< [tokens][H][dv] of dt
};

/// The step's prefill chunks in the up-projected form (`seqs`, in row order), by the groups of
/// plan_up_projected: each sequence's context latents (its blocks of `cache`, the chunk's own
/// written already) gathered into the group's rows of the workspace, the shared k_pe appended to
/// every head's key, the group's rows expanded by kv_b_proj into each head's k_nope and v (two
/// strided-batched GEMMs), then the causal attention with `scale` on tensor cores
/// (mla_up_projected_attention) into `out`'s rows of the chunks ([rows][H][dv] of dt). `q` holds
/// the step's queries, [rows][H][dn + dr] of dt with q_pe rotated; a chunk's queries are at
/// positions context_len - q_len .. context_len - 1.
status mla_prefill(gemm_runner& gemm, act_dtype dt, const mla_dims& d, const mla_prefill_workspace& ws,
                   const void* kv_b_proj, const void* q, std::span<const attn_seq> seqs, const int32_t* block_tables,
                   const void* cache, int block_size, float scale, void* out, cudaStream_t s);

/// One per-head product of the absorbed form (W_UK or W_UV, head_gemv_args): mla_head_gemv where
/// it takes the operands (decode-sized row counts), cuBLAS's strided-batched GEMM otherwise.
status mla_head_product(gemm_runner& gemm, act_dtype dt, const head_gemv_args& g, cudaStream_t s);

class mla_attention {
 public:
  using alloc_fn = std::function<status(size_t bytes, void** out)>;

  /// Keeps the shapes, the softmax scale (qk_head_dim^-0.5 times YaRN's mscale correction) and
  /// the rope's frequencies on the device (`inv_freq`, [dr / 2]) and attention factor, and sizes
  /// the buffers for up to `max_tokens` rows a step through `alloc` (memory the caller owns).
  /// The up-projected prefill's workspace holds mla_prefill_workspace_tokens(H, max_context)
  /// tokens.
  /// With `cluster_merge` (attention_tuning::latent_cluster_merge) the decode's split pieces
  /// merge within their clusters where mla_merges_in_cluster says so.
  status init(const model_config& cfg, act_dtype dt, const float* inv_freq, float attention_factor, int max_tokens,
              int max_context, int num_sms, bool cluster_merge, const alloc_fn& alloc);

  /// One layer for `rows` rows of x ([rows][hidden] of dt, the normalised input): writes the
  /// rows' latents into `cache` ([num_blocks * block_size][r + dr] of dt) and the heads'
  /// outputs into `out` ([rows][H * dv] of dt, o_proj's input): the absorbed form for rows
  /// [0, step.absorbed_rows), then mla_prefill over step.up_projected.
  status run(gemm_runner& gemm, const device_mla& w, const void* x, int rows, const mla_step& step, void* cache,
             int block_size, void* out, cudaStream_t s);

  /// Values one token caches per layer: kv_lora_rank + qk_rope_head_dim.
  int cache_width() const { return rank_ + rope_dim_; }

 private:
  act_dtype dt_ = act_dtype::bf16;
  int hidden_ = 0, heads_ = 0, q_lora_ = 0, rank_ = 0, nope_dim_ = 0, rope_dim_ = 0, v_dim_ = 0;
  int num_sms_ = 0, max_partial_rows_ = 0;
  bool cluster_merge_ = false;
  float scale_ = 1.0f, attention_factor_ = 1.0f;
  const float* inv_freq_ = nullptr;
  float* q_a_ = nullptr;        ///< [tokens][q_lora_rank]: q_a_proj's output
  void* q_a_act_ = nullptr;     ///< [tokens][q_lora_rank] of dt: after q_a_layernorm
  void* q_ = nullptr;           ///< [tokens][H][dn + dr] of dt: the query projection
  float* kv_a_ = nullptr;       ///< [tokens][r + dr]: kv_a_proj_with_mqa's output
  float* q_kv_a_ = nullptr;     ///< [H * (dn + dr) + r + dr]: one token's query and kv_a by one GEMV
  float* q_abs_ = nullptr;      ///< [tokens][H][r + dr]: q_lat = W_UK^T q_nope, then the rotated q_pe
  void* o_lat_ = nullptr;       ///< [tokens][H][r] of dt: each head's attention-weighted latent
  float* partial_o_ = nullptr;  ///< [partial rows][H][r]
  float* partial_ml_ = nullptr; ///< [partial rows][H][2]
  /// [partial rows][ceil(H / mla_heads_per_cta)]: the split pieces' counters, zeroed once here;
  /// latent_attention leaves them zero after every launch
  int32_t* split_counters_ = nullptr;
  mla_prefill_workspace prefill_;
};

}  // namespace actorserve::gpu::cuda
