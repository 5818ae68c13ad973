// The multi-head latent attention keys of DeepSeek-V2's config.json, read as transformers'
// DeepseekV2Config reads them (its defaults are V2-Lite's sizes, q_lora_rank's is 1536).
#include "config/mla_config.hpp"

#include <fmt/format.h>

#include "config/model_config_parse.hpp"

namespace actorserve {
namespace {

/// A positive integer with transformers' default when absent.
status positive_or_default(const json_obj& r, const char* key, int64_t default_value, int64_t& out) {
  out = default_value;
  return r.get_int(key, out, false, 1);
}

}  // namespace

status parse_mla_keys(const json_obj& r, model_config& cfg) {
  if (cfg.architecture != "DeepseekV2ForCausalLM") return {};
  mla_config m;
  // q_lora_rank: absent means transformers' default 1536; null means no query compression.
  dom::element q_lora;
  const bool q_lora_present = r.obj["q_lora_rank"].get(q_lora) == simdjson::SUCCESS;
  if (!q_lora_present) m.q_lora_rank = 1536;
  else if (!q_lora.is_null()) AS_TRY(r.get_int("q_lora_rank", m.q_lora_rank, true, 1));
  AS_TRY(positive_or_default(r, "kv_lora_rank", 512, m.kv_lora_rank));
  AS_TRY(positive_or_default(r, "qk_nope_head_dim", 128, m.qk_nope_head_dim));
  AS_TRY(positive_or_default(r, "qk_rope_head_dim", 64, m.qk_rope_head_dim));
  AS_TRY(positive_or_default(r, "v_head_dim", 128, m.v_head_dim));
  if (m.qk_rope_head_dim % 2 != 0) return r.bad("qk_rope_head_dim", "even (rope rotates pairs)");
  if (m.q_lora_rank > (1 << 16) || m.kv_lora_rank > (1 << 16) || m.qk_nope_head_dim > 4096 ||
      m.qk_rope_head_dim > 4096 || m.v_head_dim > 4096)
    return make_error(error_code::unsupported,
                      fmt::format("{}: latent attention ranks or head sizes are implausibly large", *r.file));
  // NOTE: the keys of MLA are one stream shared by every head; transformers' attention repeats
  // them num_attention_heads / num_key_value_heads times and so only runs with the two equal.
  if (cfg.num_kv_heads != cfg.num_heads)
    return r.bad("num_key_value_heads", fmt::format("num_attention_heads ({}) for DeepseekV2ForCausalLM", cfg.num_heads));
  bool attention_bias = false;
  AS_TRY(r.get_bool("attention_bias", attention_bias));
  m.down_proj_bias = attention_bias;
  cfg.o_bias = attention_bias;
  cfg.qkv_bias = false;
  // transformers sets head_dim to the rope width: the rotary embedding's dimension.
  cfg.head_dim = m.qk_rope_head_dim;
  cfg.mla = m;
  return {};
}

}  // namespace actorserve
