#pragma once
/// A Hugging Face model directory's config.json (+ generation_config.json) as a plain struct, for
/// the Llama family (Llama, Mistral, Qwen2, Qwen3), its mixture-of-experts relatives (Mixtral,
/// Qwen3-MoE) and DeepSeek-V2 (latent attention and experts). Anything this build cannot run is
/// rejected with an error naming the file and the field.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/error.hpp"
#include "config/mla_config.hpp"
#include "config/moe_config.hpp"
#include "config/quantization_config.hpp"

namespace actorserve {

enum class rope_kind { default_rope, linear, dynamic, llama3, yarn };

/// Rotary embedding settings, from `rope_parameters` (transformers 5) or `rope_theta` +
/// `rope_scaling` (older checkpoints).
struct rope_config {
  double theta = 10000.0;
  rope_kind kind = rope_kind::default_rope;
  double factor = 1.0;                          ///< linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;                 ///< llama3
  double high_freq_factor = 4.0;                ///< llama3
  int64_t original_max_position_embeddings = 0; ///< llama3, dynamic, yarn (0: max_position_embeddings)
  double beta_fast = 32.0;                      ///< yarn: rotations where extrapolation ends
  double beta_slow = 1.0;                       ///< yarn: rotations where interpolation begins
  double mscale = 0.0;                          ///< yarn: 0 when absent
  double mscale_all_dim = 0.0;                  ///< yarn: 0 when absent
  std::optional<double> attention_factor;       ///< yarn: explicit cos/sin multiplier
  bool truncate = true;                         ///< yarn: correction range rounded outwards to whole dims
};

/// generation_config.json's sampling defaults (vLLM reads the same keys); unset: not in the file.
struct generation_defaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;   ///< the default max_tokens
};

struct model_config {
  std::string architecture;       ///< e.g. "LlamaForCausalLM"
  std::string model_type;         ///< e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;           ///< explicit, or hidden_size / num_heads; MLA: qk_rope_head_dim (the rope width)
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool qkv_bias = false;          ///< q/k/v projections carry a bias (Qwen2 always)
  bool o_bias = false;            ///< o_proj carries a bias (Llama attention_bias)
  bool qk_norm = false;           ///< RMSNorm over each head of q and k before rope (Qwen3)
  int64_t max_position_embeddings = 0;
  std::optional<int64_t> sliding_window;   ///< Mistral/Qwen2 when enabled
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;      ///< config.json's, extended by generation_config.json's
  std::string torch_dtype = "float32";     ///< "float32" | "bfloat16" | "float16"
  rope_config rope;
  std::optional<moe_config> moe;           ///< sparse models only
  std::optional<mla_config> mla;           ///< multi-head latent attention (DeepSeek-V2) only
  std::optional<quantization_config> quantization;   ///< FP8 checkpoints only
  generation_defaults sampling_defaults;   ///< from generation_config.json

  /// Whether decoder layer `layer` has a mixture-of-experts FFN (else a dense MLP of
  /// intermediate_size).
  bool is_sparse_layer(int64_t layer) const { return moe && moe->is_sparse(layer); }
};

/// Short name of a rope kind as config.json spells it ("default", "linear", ...).
const char* to_string(rope_kind k);

/// Reads `model_dir`/config.json and the optional generation_config.json.
result<model_config> load_model_config(const std::string& model_dir);

/// Parses the text of a config.json (and optionally of generation_config.json; empty = absent).
/// `dir_for_errors` prefixes file names in error messages.
result<model_config> parse_model_config(const std::string& config_json, const std::string& generation_json,
                                        const std::string& dir_for_errors);

}  // namespace actorserve
