#pragma once
/// The fp32 Llama-family forward pass over a paged KV cache (the reference the CUDA executor is
/// checked against): Qwen3's q/k norm, the mixture-of-experts FFN of Mixtral, Qwen3-MoE and
/// DeepSeek-V2, and DeepSeek-V2's latent attention (mla_attention) included. Inputs are validated
/// by the caller (cpu_executor).
///
/// One cpu_model is one tensor-parallel shard (shard_plan; the whole model over one shard): its
/// config counts its own heads, KV heads, intermediate columns and vocabulary slice, and its
/// weights are those slices. It computes one stage of a layer at a time, each stage's output a
/// partial sum over the shards; model_shard runs the stages, sums the partials with the other
/// shards (host_collective) and keeps the residual stream.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "config/model_config.hpp"
#include "gpu/attention/cascade_plan.hpp"
#include "gpu/cpu/cascade_attention.hpp"
#include "gpu/cpu/kv_cache.hpp"
#include "gpu/cpu/mla_attention.hpp"
#include "gpu/cpu/moe_ffn.hpp"
#include "gpu/cpu/step_tokens.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/model_weights.hpp"

namespace actorserve::gpu::cpu {

class cpu_model {
 public:
  /// `cfg` and `weights` are the shard's (shard_plan::shard_config, shard_weights_f32); its
  /// vocabulary slice starts at token id `vocab_begin`. `form` chooses how latent-attention layers
  /// (DeepSeek-V2) compute; other models ignore it.
  cpu_model(model_config cfg, model_weights_f32 weights, int64_t vocab_begin = 0,
            mla_form form = mla_form::automatic);

  const model_config& config() const { return cfg_; }
  /// `--kv-cache-dtype fp8`: K and V are stored rounded to FP8 E4M3 with these per-layer scales
  /// (value = e4m3(x / scale) x scale), as an FP8 cache holds them; the cache stays fp32 in memory.
  /// Latent attention stores its latent rows so, each layer's with its k_scale.
  void set_fp8_kv_scales(std::vector<float> k_scales, std::vector<float> v_scales);
  /// Sets up a step: token positions, rope tables, attention work items. Call before the stages.
  /// `cascade` groups decodes that share prefix blocks: their attention over the prefix is one
  /// shared-prefix pass per group and KV head, merged with each one's suffix (cascade_attention).
  /// Latent-attention models ignore it.
  void begin_step(std::span<const forward_seq> seqs, const cascade_plan& cascade = {});
  /// Tokens in the step (T).
  size_t num_tokens() const { return tok_seq_.size(); }
  /// out [T][hidden]: the embedding rows of the step's tokens within the vocabulary slice, zeros
  /// for the others.
  void embed(std::span<const forward_seq> seqs, float* out) const;
  /// out [T][hidden]: layer `layer`'s attention over the residual stream `x` [T][hidden] through
  /// this shard's heads and o_proj columns (plus o_proj's bias where the weights hold it).
  /// Writes the step's K/V (or latents) into `cache`.
  void attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs,
                 const float* x, float* out);
  /// out [T][hidden]: layer `layer`'s MLP or experts over `x` through this shard's columns.
  void ffn(thread_pool& pool, int64_t layer, const float* x, float* out);
  /// out [rows][vocab slice]: the final norm of `x`'s rows `rows`, then this shard's logits.
  void lm_head(thread_pool& pool, const float* x, std::span<const size_t> rows, float* out);
  /// The decoder layers with a sparse FFN, in order (empty for a dense model).
  const std::vector<int32_t>& moe_layers() const { return moe_layers_; }
  /// Tokens this step routed to each expert so far, [moe_layers()][expert] flattened.
  const std::vector<int64_t>& expert_tokens() const { return expert_tokens_; }

 private:
  /// A unit of attention work: some consecutive new tokens of one sequence, one query head.
  struct attn_item {
    int32_t seq, head;
    int64_t t_begin, t_end;   ///< flat token range of the step
    /// Keys of the first prefix_blocks blocks come from the group's shared-prefix pass.
    int64_t prefix_blocks = 0;
  };
  /// A cascade group as the step sees it: the shared blocks and the members' decode tokens.
  struct prefix_group {
    std::span<const int32_t> blocks;   ///< the shared prefix's blocks
    std::vector<int32_t> seqs;         ///< members, in slot order
    int32_t first_slot = 0;            ///< slot of seqs[0] in prefix_out_ / prefix_stats_
  };
  /// One shared-prefix pass: a group's queries of one KV head's query heads.
  struct prefix_item {
    int32_t group, kv_head;
  };
  /// The shared-prefix passes of the step's cascade groups (prefix_out_, prefix_stats_).
  void shared_prefix_attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer);
  /// Per-head attention of one layer: q/k/v projections, rope, K/V into the cache, attention.
  void dense_attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);
  void attention_layer(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);
  void write_kv(paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs);

  model_config cfg_;
  model_weights_f32 w_;
  int64_t vocab_begin_ = 0;              ///< first token id of the vocabulary slice
  std::optional<moe_ffn> moe_;           ///< the sparse layers' FFN (MoE models)
  std::optional<mla_attention> mla_;     ///< the latent-attention layers (DeepSeek-V2)
  std::vector<int32_t> moe_layers_;
  std::vector<int64_t> expert_tokens_;
  std::vector<float> static_inv_freq_;   ///< unless rope is dynamic
  float rope_scale_ = 1.0f;              ///< YaRN's attention factor on cos and sin
  std::vector<float> k_scale_, v_scale_; ///< per layer, with an FP8 KV cache; empty otherwise
  // Per-step scratch, reused across steps. T = tokens in the step.
  std::vector<int32_t> tok_seq_;         ///< [T] sequence index
  std::vector<int64_t> tok_pos_;         ///< [T] position
  std::vector<int64_t> seq_start_;       ///< [num_seqs] first flat token
  std::vector<float> cos_, sin_;         ///< [T][head_dim/2]
  std::vector<float> xn_, q_, k_, v_, attn_, gate_, up_;
  std::vector<attn_item> items_;
  std::vector<prefix_group> prefix_groups_;
  std::vector<prefix_item> prefix_items_;
  std::vector<int32_t> cascade_slot_;          ///< [num_seqs] a grouped decode's slot, else -1
  std::vector<float> prefix_out_;              ///< [slots][num_heads][head_dim] prefix partials
  std::vector<softmax_stats> prefix_stats_;    ///< [slots][num_heads]
};

}  // namespace actorserve::gpu::cpu
