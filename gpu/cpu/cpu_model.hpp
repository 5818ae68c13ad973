#pragma once
/// The fp32 Llama-family forward pass over a paged KV cache (the reference the CUDA executor is
/// checked against): Qwen3's q/k norm, the mixture-of-experts FFN of Mixtral, Qwen3-MoE and
/// DeepSeek-V2, and DeepSeek-V2's latent attention (mla_attention) included. Inputs are validated
/// by the caller (cpu_executor).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "config/model_config.hpp"
#include "gpu/cpu/kv_cache.hpp"
#include "gpu/cpu/mla_attention.hpp"
#include "gpu/cpu/moe_ffn.hpp"
#include "gpu/cpu/step_tokens.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/model_weights.hpp"

namespace actorserve::gpu::cpu {

class cpu_model {
 public:
  /// `form` chooses how latent-attention layers (DeepSeek-V2) compute; other models ignore it.
  cpu_model(model_config cfg, model_weights_f32 weights, mla_form form = mla_form::automatic);

  const model_config& config() const { return cfg_; }
  /// Computes the new tokens of every sequence, writing their K/V into `cache`; appends to
  /// `logits` one row of vocab_size floats per sequence with want_logits, in batch order.
  void forward(thread_pool& pool, paged_kv_cache& cache, std::span<const forward_seq> seqs,
               std::vector<float>& logits);
  /// The decoder layers with a sparse FFN, in order (empty for a dense model).
  const std::vector<int32_t>& moe_layers() const { return moe_layers_; }
  /// Tokens the last forward routed to each expert, [moe_layers()][expert] flattened.
  const std::vector<int64_t>& expert_tokens() const { return expert_tokens_; }

 private:
  /// A unit of attention work: some consecutive new tokens of one sequence, one query head.
  struct attn_item {
    int32_t seq, head;
    int64_t t_begin, t_end;   ///< flat token range of the step
  };
  void prepare(std::span<const forward_seq> seqs);
  /// Per-head attention of one layer: q/k/v projections, rope, K/V into the cache, attention.
  void dense_attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);
  void attention_layer(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);
  void write_kv(paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);

  model_config cfg_;
  model_weights_f32 w_;
  std::optional<moe_ffn> moe_;           ///< the sparse layers' FFN (MoE models)
  std::optional<mla_attention> mla_;     ///< the latent-attention layers (DeepSeek-V2)
  std::vector<int32_t> moe_layers_;
  std::vector<int64_t> expert_tokens_;
  std::vector<float> static_inv_freq_;   ///< unless rope is dynamic
  float rope_scale_ = 1.0f;              ///< YaRN's attention factor on cos and sin
  // Per-step scratch, reused across steps. T = tokens in the step.
  std::vector<int32_t> tok_seq_;         ///< [T] sequence index
  std::vector<int64_t> tok_pos_;         ///< [T] position
  std::vector<int64_t> seq_start_;       ///< [num_seqs] first flat token
  std::vector<float> cos_, sin_;         ///< [T][head_dim/2]
  std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<attn_item> items_;
};

}  // namespace actorserve::gpu::cpu
