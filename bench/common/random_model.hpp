#pragma once
/// Random-weight Hugging Face model directories for benchmarks: config.json,
/// generation_config.json, bf16 safetensors shards with model.safetensors.index.json, and a
/// tokenizer.json whose vocabulary is extended to cover the model's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/error.hpp"

namespace actorserve::bench {

/// What DeepSeek-V2 adds to a mixture-of-experts shape: latent attention, shared experts, dense
/// first layers, its router settings and YaRN rope (the fields config.json carries); the defaults
/// are DeepSeek-V2-Lite's.
struct deepseek_shape {
  int64_t q_lora_rank = 0;                 ///< 0: q_proj ("q_lora_rank": null)
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  int64_t n_shared_experts = 2;            ///< one MLP of moe_intermediate_size x n_shared_experts
  int64_t first_k_dense_replace = 1;       ///< dense layers (of intermediate_size) before the sparse ones
  double routed_scaling_factor = 1.0;
  std::string topk_method = "greedy";
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double yarn_factor = 40.0;               ///< rope_scaling type yarn (0: default rope)
  int64_t yarn_original_max_position_embeddings = 4096;
  double yarn_mscale = 0.707;
  double yarn_mscale_all_dim = 0.707;
};

/// The shape and identity of a Llama-family, mixture-of-experts or DeepSeek-V2 model (the fields
/// config.json carries).
struct model_shape {
  std::string architecture = "LlamaForCausalLM";  ///< LlamaForCausalLM | MistralForCausalLM | Qwen2ForCausalLM |
                                                  ///< Qwen3ForCausalLM | MixtralForCausalLM | Qwen3MoeForCausalLM |
                                                  ///< DeepseekV2ForCausalLM
  std::string model_type = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_layers = 32;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 32;
  int64_t head_dim = 0;                  ///< 0: hidden_size / num_heads
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t sliding_window = 0;            ///< 0: none
  bool tie_word_embeddings = false;
  // Mixture of experts (Mixtral, Qwen3-MoE: every layer sparse; DeepSeek-V2: from
  // first_k_dense_replace on).
  int64_t num_experts = 0;               ///< 0: dense
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;     ///< Qwen3-MoE's and DeepSeek-V2's expert size (Mixtral's is intermediate_size)
  std::optional<deepseek_shape> deepseek;   ///< DeepseekV2ForCausalLM only

  int64_t effective_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  bool is_moe() const { return num_experts > 0; }
  /// Whether decoder layer `layer` has the experts.
  bool is_sparse_layer(int64_t layer) const {
    return is_moe() && (!deepseek || layer >= deepseek->first_k_dense_replace);
  }
  /// Weights one token reads: the dense ones and top-k experts' (all when dense).
  int64_t num_active_parameters() const;
  /// Number of weights (all tensors the loader binds).
  int64_t num_parameters() const;
};

/// The shape of a named preset (real config.json values): llama-2-7b, llama-2-13b, llama-3-8b,
/// mistral-7b (Mistral-7B-v0.1), qwen2-7b, mixtral-8x7b (Mixtral-8x7B-v0.1), qwen3-30b-a3b,
/// deepseek-v2-lite (DeepSeek-V2-Lite); or a tiny test shape: tiny, tiny-moe (Qwen3-MoE),
/// tiny-mixtral, deepseek-tiny (DeepSeek-V2-Lite's structure at sizes the CPU executor runs).
result<model_shape> preset_shape(const std::string& name);
/// The preset names, for --help.
std::vector<std::string> preset_names();

struct random_model_options {
  std::string output_dir;
  std::string tokenizer_json;            ///< copied (and extended); empty: a synthetic byte-level one
  bool extend_tokenizer = true;          ///< add synthetic tokens so every model id decodes
  uint64_t seed = 1;
  double std = 0.02;                     ///< weights ~ N(0, std); norms are 1
  int32_t threads = 0;                   ///< 0: hardware concurrency
  double shard_bytes = 5e9;              ///< safetensors shard size limit
  /// config.json, generation_config.json and the tokenizer only: the weights are generated at
  /// load by `--load-format dummy` (models larger than the disk).
  bool config_only = false;
};

/// What was written.
struct random_model_report {
  int64_t bytes_written = 0;
  int32_t num_shards = 0;
  int64_t tokenizer_vocab = 0;           ///< after extension
  int64_t added_tokens = 0;              ///< synthetic tokens appended
  double seconds = 0;
};

/// Writes the whole directory (created if missing). Errors name the file.
result<random_model_report> write_random_model(const model_shape& shape, const random_model_options& opts);

/// The config.json text of `shape` with the given special token ids (bf16).
std::string config_json(const model_shape& shape, int32_t bos_id, const std::vector<int32_t>& eos_ids);

}  // namespace actorserve::bench
