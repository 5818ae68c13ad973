// config.json (+ generation_config.json) of a model directory: the input is the config text, then
// optionally a NUL byte and the generation config text. Either an error, or a config whose
// shapes are ones the executors can allocate from.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/model_config.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = actorserve::fuzz::split_nul(actorserve::fuzz::as_text(data, size), 2);
  std::string config(parts[0]);
  std::string generation = parts.size() > 1 ? std::string(parts[1]) : std::string();
  auto cfg = actorserve::parse_model_config(config, generation, "fuzz-model");
  if (!cfg) return 0;
  FUZZ_CHECK(cfg->vocab_size > 0 && cfg->hidden_size > 0 && cfg->num_layers > 0, "non-positive size accepted");
  FUZZ_CHECK(cfg->num_heads > 0 && cfg->num_kv_heads > 0 && cfg->head_dim > 0, "non-positive head count accepted");
  FUZZ_CHECK(cfg->num_heads % cfg->num_kv_heads == 0, "num_heads %lld not a multiple of num_kv_heads %lld",
             static_cast<long long>(cfg->num_heads), static_cast<long long>(cfg->num_kv_heads));
  FUZZ_CHECK(cfg->intermediate_size > 0 && cfg->max_position_embeddings > 0, "non-positive size accepted");
  FUZZ_CHECK(cfg->head_dim % 2 == 0 && cfg->head_dim <= 4096, "head_dim %lld accepted",
             static_cast<long long>(cfg->head_dim));
  FUZZ_CHECK(cfg->rms_norm_eps > 0 && cfg->rope.factor > 0, "non-positive rms_norm_eps or rope factor accepted");
  // Known issue "rope-theta-positive": without rope_scaling/rope_parameters the theta check is skipped.
  if (!actorserve::fuzz::known_issue("rope-theta-positive"))
    FUZZ_CHECK(cfg->rope.theta > 0, "rope theta %g accepted", cfg->rope.theta);
  FUZZ_CHECK(std::isfinite(cfg->rope.theta) && std::isfinite(cfg->rope.factor), "non-finite rope value accepted");
  if (cfg->sliding_window) FUZZ_CHECK(*cfg->sliding_window > 0, "non-positive sliding_window accepted");
  if (cfg->moe) {
    const auto& m = *cfg->moe;
    FUZZ_CHECK(m.num_experts > 0 && m.top_k > 0 && m.top_k <= m.num_experts, "top_k %lld of %lld experts accepted",
               static_cast<long long>(m.top_k), static_cast<long long>(m.num_experts));
    FUZZ_CHECK(m.expert_intermediate_size > 0 && m.routed_scaling_factor > 0, "non-positive expert setting accepted");
    FUZZ_CHECK(static_cast<int64_t>(m.sparse_layers.size()) == cfg->num_layers, "sparse_layers of the wrong size");
    FUZZ_CHECK(m.num_experts % m.num_groups == 0 && m.topk_groups <= m.num_groups &&
                   m.top_k <= m.topk_groups * m.experts_per_group(),
               "group limits accepted that leave fewer than top_k experts");
  }
  if (cfg->mla) {
    const auto& a = *cfg->mla;
    FUZZ_CHECK(a.q_lora_rank >= 0 && a.kv_lora_rank > 0 && a.qk_nope_head_dim > 0 && a.v_head_dim > 0,
               "non-positive latent attention size accepted");
    FUZZ_CHECK(a.qk_rope_head_dim > 0 && a.qk_rope_head_dim % 2 == 0 && cfg->head_dim == a.qk_rope_head_dim,
               "qk_rope_head_dim %lld accepted with head_dim %lld", static_cast<long long>(a.qk_rope_head_dim),
               static_cast<long long>(cfg->head_dim));
    FUZZ_CHECK(cfg->num_kv_heads == cfg->num_heads, "latent attention with num_key_value_heads != num_attention_heads");
  }
  if (cfg->rope.kind == actorserve::rope_kind::yarn)
    FUZZ_CHECK(cfg->rope.beta_fast > 0 && cfg->rope.beta_slow > 0 && cfg->rope.mscale >= 0 &&
                   cfg->rope.mscale_all_dim >= 0 && cfg->rope.original_max_position_embeddings > 0 &&
                   (!cfg->rope.attention_factor || *cfg->rope.attention_factor > 0),
               "YaRN setting out of range accepted");
  if (cfg->bos_token_id) FUZZ_CHECK(*cfg->bos_token_id >= 0, "negative bos_token_id accepted");
  for (int32_t eos : cfg->eos_token_ids)
    FUZZ_CHECK(eos >= 0, "negative eos_token_id %d accepted", eos);
  return 0;
}
