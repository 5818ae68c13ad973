#pragma once
/// Multi-head latent attention (DeepSeek-V2): the low-rank projections of the queries and of the
/// keys and values, and the head sizes, as config.json names them. Per token and layer the KV
/// cache holds the latent c_kv (kv_lora_rank) and one rope key shared by all heads
/// (qk_rope_head_dim); kv_b_proj expands the latent into each head's key and value.
#include <cstdint>

namespace actorserve {

struct mla_config {
  int64_t q_lora_rank = 0;        ///< 0: q_proj (V2-Lite); else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;       ///< width of the cached latent c_kv
  int64_t qk_nope_head_dim = 0;   ///< per head: the query/key part without rope
  int64_t qk_rope_head_dim = 0;   ///< per head: the query's rope part; the key's is shared by the heads
  int64_t v_head_dim = 0;         ///< per head: the value
  bool down_proj_bias = false;    ///< attention_bias: q_a_proj and kv_a_proj_with_mqa carry a bias

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  /// Floats one token caches per layer: c_kv then k_pe.
  int64_t cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  /// Values one token would cache per layer with per-head keys and values (what the latent
  /// replaces): num_heads x (qk_head_dim + v_head_dim), 5,120 for V2-Lite against its 576.
  int64_t per_head_cache_dim(int64_t num_heads) const { return num_heads * (qk_head_dim() + v_head_dim); }
};

}  // namespace actorserve
