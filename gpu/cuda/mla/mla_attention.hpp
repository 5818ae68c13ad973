#pragma once
/// DeepSeek-V2's multi-head latent attention on the device, in the absorbed form for every token
/// (docs/mla.md): the query and latent projections, W_UK applied to each head's q_nope (one
/// strided-batched GEMM), the latent norm, rope and cache write, the attention over the latent
/// cache (mla_kernels.hpp), and W_UV applied to each head's latent output (a second one). No host
/// round trip: a decode step that runs it is capturable in a CUDA graph.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "config/error.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

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
  void* kv_a_proj = nullptr;    ///< kv_a_proj_with_mqa: [r + dr][hidden]
  float* kv_a_bias = nullptr;   ///< [r + dr] or null
  float* kv_a_norm = nullptr;   ///< [r]
  /// [H * (dn + dv)][r]: per head W_UK (dn rows), then W_UV (dv rows). The absorbed matrices are
  /// read in place: W_UK^T and W_UV are operands of strided-batched GEMMs over the heads.
  void* kv_b_proj = nullptr;
};

/// Where one step's per-row metadata sits on the device.
struct mla_step {
  const int32_t* positions = nullptr;     ///< [rows]
  const int32_t* slots = nullptr;         ///< [rows]: latent cache slot; negative: none
  const int32_t* token_seqs = nullptr;    ///< [rows]: the row's sequence; negative: a padding row
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
};

class mla_attention {
 public:
  using alloc_fn = std::function<status(size_t bytes, void** out)>;

  /// Keeps the shapes, the softmax scale (qk_head_dim^-0.5 times YaRN's mscale correction) and
  /// the rope's frequencies on the device (`inv_freq`, [dr / 2]) and attention factor, and sizes
  /// the buffers for up to `max_tokens` rows a step through `alloc` (memory the caller owns).
  status init(const model_config& cfg, act_dtype dt, const float* inv_freq, float attention_factor, int max_tokens,
              int num_sms, const alloc_fn& alloc);

  /// One layer for `rows` rows of x ([rows][hidden] of dt, the normalised input): writes the
  /// rows' latents into `cache` ([num_blocks * block_size][r + dr] of dt) and the heads'
  /// outputs into `out` ([rows][H * dv] of dt, o_proj's input).
  status run(gemm_runner& gemm, const device_mla& w, const void* x, int rows, const mla_step& step, void* cache,
             int block_size, void* out, cudaStream_t s);

  /// Values one token caches per layer: kv_lora_rank + qk_rope_head_dim.
  int cache_width() const { return rank_ + rope_dim_; }

 private:
  act_dtype dt_ = act_dtype::bf16;
  int hidden_ = 0, heads_ = 0, q_lora_ = 0, rank_ = 0, nope_dim_ = 0, rope_dim_ = 0, v_dim_ = 0;
  int num_sms_ = 0, max_partial_rows_ = 0;
  float scale_ = 1.0f, attention_factor_ = 1.0f;
  const float* inv_freq_ = nullptr;
  float* q_a_ = nullptr;        ///< [tokens][q_lora_rank]: q_a_proj's output
  void* q_a_act_ = nullptr;     ///< [tokens][q_lora_rank] of dt: after q_a_layernorm
  void* q_ = nullptr;           ///< [tokens][H][dn + dr] of dt: the query projection
  float* kv_a_ = nullptr;       ///< [tokens][r + dr]: kv_a_proj_with_mqa's output
  float* q_abs_ = nullptr;      ///< [tokens][H][r + dr]: q_lat = W_UK^T q_nope, then the rotated q_pe
  void* o_lat_ = nullptr;       ///< [tokens][H][r] of dt: each head's attention-weighted latent
  float* partial_o_ = nullptr;  ///< [partial rows][H][r]
  float* partial_ml_ = nullptr; ///< [partial rows][H][2]
};

}  // namespace actorserve::gpu::cuda
