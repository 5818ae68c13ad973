#pragma once
/// The Llama-family weights (Llama, Mistral, Qwen2, Qwen3), the experts of Mixtral, Qwen3-MoE and
/// DeepSeek-V2 and DeepSeek-V2's latent attention, bound by name and shape from a model directory: raw host views as stored (for a
/// device uploader) and fp32 copies (CPU executor).
#include <optional>
#include <string>
#include <vector>

#include "config/error.hpp"
#include "config/model_config.hpp"
#include "gpu/model/weight_store.hpp"

namespace actorserve::gpu {

/// One SwiGLU MLP as stored: down(silu(gate(x)) * up(x)).
struct mlp_views {
  tensor_view gate_proj;                   ///< [intermediate][hidden]
  tensor_view up_proj;                     ///< [intermediate][hidden]
  tensor_view down_proj;                   ///< [hidden][intermediate]
};

/// A sparse layer's router and experts as stored (HF's per-expert tensors).
struct moe_views {
  tensor_view router;                      ///< [num_experts][hidden]
  std::vector<mlp_views> experts;          ///< each of expert_intermediate_size
  /// The id of experts[0]: 0, unless an expert-parallel shard holds only its range (shard_plan::experts).
  int64_t first_expert = 0;
  std::optional<mlp_views> shared;         ///< the shared experts as one MLP (DeepSeek-V2)
};

/// One layer's multi-head latent attention as stored (DeepSeek-V2). H = num_heads.
struct mla_views {
  std::optional<tensor_view> q_proj;       ///< [H*qk_head_dim][hidden], without q_lora
  std::optional<tensor_view> q_a_proj;     ///< [q_lora_rank][hidden], with q_lora
  std::optional<tensor_view> q_a_bias;     ///< [q_lora_rank], with q_lora and attention_bias
  std::optional<tensor_view> q_a_norm;     ///< [q_lora_rank], with q_lora
  std::optional<tensor_view> q_b_proj;     ///< [H*qk_head_dim][q_lora_rank], with q_lora
  tensor_view kv_a_proj;                   ///< kv_a_proj_with_mqa: [kv_lora_rank + qk_rope_head_dim][hidden]
  std::optional<tensor_view> kv_a_bias;    ///< [kv_lora_rank + qk_rope_head_dim], with attention_bias
  tensor_view kv_a_norm;                   ///< [kv_lora_rank]
  tensor_view kv_b_proj;                   ///< [H*(qk_nope_head_dim + v_head_dim)][kv_lora_rank]
};

/// One decoder layer as stored. Projections are [out][in] (nn.Linear layout). A latent-attention
/// layer has `mla` and an o_proj of [hidden][num_heads*v_head_dim], and no q/k/v_proj.
struct layer_views {
  tensor_view input_norm;                  ///< [hidden]
  tensor_view q_proj;                      ///< [num_heads*head_dim][hidden]
  tensor_view k_proj;                      ///< [num_kv_heads*head_dim][hidden]
  tensor_view v_proj;                      ///< [num_kv_heads*head_dim][hidden]
  tensor_view o_proj;                      ///< [hidden][num_heads*head_dim]
  std::optional<mla_views> mla;
  std::optional<tensor_view> q_bias, k_bias, v_bias, o_bias;
  std::optional<tensor_view> q_norm, k_norm;   ///< [head_dim] (Qwen3)
  tensor_view post_norm;                   ///< [hidden]
  tensor_view gate_proj;                   ///< [intermediate][hidden]; empty in a sparse layer
  tensor_view up_proj;                     ///< [intermediate][hidden]; empty in a sparse layer
  tensor_view down_proj;                   ///< [hidden][intermediate]; empty in a sparse layer
  std::optional<moe_views> moe;            ///< a sparse layer's FFN
};

struct model_weight_views {
  tensor_view embed_tokens;                ///< [vocab][hidden]
  std::vector<layer_views> layers;
  tensor_view final_norm;                  ///< [hidden]
  tensor_view lm_head;                     ///< [vocab][hidden]; the embedding when tied
  bool lm_head_tied = false;
};

/// A model directory opened for serving: config, mapped weights and their bound views.
struct model_files {
  model_config config;
  weight_store store;
  model_weight_views views;                ///< point into `store`'s mappings
};

/// Binds every tensor the config needs; a missing or mis-shaped tensor names its file and name.
result<model_weight_views> bind_weight_views(const weight_store& store, const model_config& cfg);

/// Loads config.json (+ generation_config.json), maps the safetensors and binds the weights; a
/// dummy source reads no safetensors file and binds generated tensors of the same shapes.
result<model_files> open_model_files(const std::string& model_dir, const weight_source& source = {});

/// One SwiGLU MLP in fp32.
struct mlp_weights_f32 {
  std::vector<float> gate_proj, up_proj, down_proj;
  bool empty() const { return gate_proj.empty(); }
};

/// A sparse layer's router and experts in fp32.
struct moe_weights_f32 {
  std::vector<float> router;               ///< [num_experts][hidden]
  /// The routed experts held, ids [first_expert, first_expert + experts.size()): every expert,
  /// unless an expert-parallel shard holds only its range (shard_plan::experts).
  std::vector<mlp_weights_f32> experts;
  int64_t first_expert = 0;
  mlp_weights_f32 shared;                  ///< empty without shared experts
};

/// One layer's latent attention in fp32 (mla_views' shapes); absent tensors are empty.
struct mla_weights_f32 {
  std::vector<float> q_proj, q_a_proj, q_a_bias, q_a_norm, q_b_proj;
  std::vector<float> kv_a_proj, kv_a_bias, kv_a_norm, kv_b_proj;
};

/// One decoder layer in fp32; biases and norms are empty when absent.
struct layer_weights_f32 {
  std::vector<float> input_norm, q_proj, k_proj, v_proj, o_proj;
  std::optional<mla_weights_f32> mla;
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
  std::vector<float> q_norm, k_norm;
  std::vector<float> post_norm, gate_proj, up_proj, down_proj;   ///< the dense MLP; empty in a sparse layer
  std::optional<moe_weights_f32> moe;
};

/// The whole model in fp32 (exact upcast of the stored weights).
struct model_weights_f32 {
  std::vector<float> embed_tokens;
  std::vector<layer_weights_f32> layers;
  std::vector<float> final_norm;
  std::vector<float> lm_head;              ///< empty when tied to embed_tokens
  const float* lm_head_data() const { return lm_head.empty() ? embed_tokens.data() : lm_head.data(); }
};

/// Upcasts bound views to fp32 (F8_E4M3 weights dequantized with their scales).
model_weights_f32 upcast_weights(const model_weight_views& views);

/// `--quantization fp8` on the CPU: rounds every linear layer's weight (attention, MLP, experts,
/// latent-attention projections; not embeddings, routers or lm_head) to FP8 E4M3 with one scale
/// per output channel, so the fp32 forward pass computes with the weights an FP8 GEMM would read.
void quantize_linear_weights_e4m3(const model_weight_views& views, model_weights_f32& weights);

}  // namespace actorserve::gpu
