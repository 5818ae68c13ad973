// The mixture-of-experts keys of config.json, as each family's transformers config writes them.
#include "config/moe_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "config/model_config_parse.hpp"

namespace actorserve {
namespace {

/// A required positive integer.
status need_positive(const json_obj& r, const char* key, int64_t& out) { return r.get_int(key, out, true, 1); }

/// A list of layer indices, each in [0, num_layers); absent or null leaves `out` empty.
status get_layer_list(const json_obj& r, const char* key, int64_t num_layers, std::vector<int64_t>& out) {
  out.clear();
  auto e = r.find(key);
  if (!e) return {};
  dom::array arr;
  const std::string want = fmt::format("a list of layer indices below num_hidden_layers ({})", num_layers);
  if (e->get_array().get(arr) != simdjson::SUCCESS) return r.bad(key, want);
  for (dom::element item : arr) {
    int64_t v = 0;
    if (item.get_int64().get(v) != simdjson::SUCCESS || v < 0 || v >= num_layers) return r.bad(key, want);
    out.push_back(v);
  }
  return {};
}

/// A string key whose value must be one of `allowed` (the first is the default when absent).
status get_choice(const json_obj& r, const char* key, std::initializer_list<const char*> allowed, std::string& out) {
  out = *allowed.begin();
  AS_TRY(r.get_string(key, out));
  for (const char* a : allowed)
    if (out == a) return {};
  std::string names;
  for (const char* a : allowed) names += fmt::format("{}{}", names.empty() ? "" : ", ", a);
  return make_error(error_code::unsupported,
                    fmt::format("{}: field '{}{}' has unsupported value '{}' ({})", *r.file, r.path, key, out, names));
}

/// MixtralForCausalLM: softmax over num_local_experts, top-k renormalised, every layer sparse;
/// the experts have intermediate_size.
status parse_mixtral(const json_obj& r, const model_config& cfg, moe_config& m) {
  AS_TRY(need_positive(r, "num_local_experts", m.num_experts));
  AS_TRY(need_positive(r, "num_experts_per_tok", m.top_k));
  m.expert_intermediate_size = cfg.intermediate_size;
  m.renormalize = true;
  m.sparse_layers.assign(static_cast<size_t>(cfg.num_layers), true);
  return {};
}

/// Qwen3MoeForCausalLM: softmax, top-k renormalised when norm_topk_prob; layer i is sparse unless
/// listed in mlp_only_layers, and when (i + 1) is a multiple of decoder_sparse_step.
status parse_qwen3_moe(const json_obj& r, const model_config& cfg, moe_config& m) {
  // transformers 5 writes num_experts as num_local_experts; the published checkpoints as num_experts.
  int64_t local = 0;
  AS_TRY(r.get_int("num_experts", m.num_experts, false, 1));
  AS_TRY(r.get_int("num_local_experts", local, false, 1));
  if (m.num_experts == 0 && local == 0) return r.missing("num_experts");
  if (m.num_experts != 0 && local != 0 && m.num_experts != local)
    return r.bad("num_local_experts", fmt::format("equal to num_experts ({})", m.num_experts));
  if (m.num_experts == 0) m.num_experts = local;
  AS_TRY(need_positive(r, "num_experts_per_tok", m.top_k));
  AS_TRY(need_positive(r, "moe_intermediate_size", m.expert_intermediate_size));
  AS_TRY(r.get_bool("norm_topk_prob", m.renormalize));
  int64_t step = 1;
  AS_TRY(r.get_int("decoder_sparse_step", step, false, 1));
  std::vector<int64_t> dense;
  AS_TRY(get_layer_list(r, "mlp_only_layers", cfg.num_layers, dense));
  m.sparse_layers.assign(static_cast<size_t>(cfg.num_layers), false);
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    m.sparse_layers[static_cast<size_t>(i)] =
        (i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end();
  return {};
}

/// DeepseekV2ForCausalLM: softmax scores, greedy or group-limited top-k, the weights times
/// routed_scaling_factor (never renormalised), n_shared_experts always on; layer i is sparse from
/// first_k_dense_replace on where i is a multiple of moe_layer_freq (vLLM's rule; transformers
/// ignores moe_layer_freq, which every published checkpoint sets to 1). transformers' router
/// ignores norm_topk_prob and scoring_func, so a true norm_topk_prob and a sigmoid scoring_func
/// (which it would compute as softmax) are refused.
status parse_deepseek_v2(const json_obj& r, const model_config& cfg, moe_config& m) {
  AS_TRY(need_positive(r, "n_routed_experts", m.num_experts));
  AS_TRY(need_positive(r, "num_experts_per_tok", m.top_k));
  AS_TRY(need_positive(r, "moe_intermediate_size", m.expert_intermediate_size));
  AS_TRY(r.get_int("n_shared_experts", m.num_shared_experts, false, 0));
  AS_TRY(r.get_double("routed_scaling_factor", m.routed_scaling_factor));
  if (!(m.routed_scaling_factor > 0)) return r.bad("routed_scaling_factor", "positive");
  bool norm_topk_prob = false;
  AS_TRY(r.get_bool("norm_topk_prob", norm_topk_prob));
  if (norm_topk_prob)
    return make_error(error_code::unsupported,
                      fmt::format("{}: field 'norm_topk_prob' true is not supported for DeepseekV2ForCausalLM "
                                  "(transformers ignores it, DeepSeek's own code renormalises)",
                                  *r.file));
  std::string scoring, method;
  AS_TRY(get_choice(r, "scoring_func", {"softmax", "sigmoid"}, scoring));
  AS_TRY(get_choice(r, "topk_method", {"greedy", "group_limited_greedy"}, method));
  if (scoring != "softmax")
    return make_error(error_code::unsupported,
                      fmt::format("{}: field 'scoring_func' '{}' is not supported for DeepseekV2ForCausalLM "
                                  "(transformers' DeepSeek-V2 router always scores with softmax)",
                                  *r.file, scoring));
  m.scoring = moe_scoring::softmax;
  m.topk_method = method == "greedy" ? moe_topk_method::greedy : moe_topk_method::group_limited_greedy;
  AS_TRY(r.get_int("n_group", m.num_groups, false, 1));
  AS_TRY(r.get_int("topk_group", m.topk_groups, false, 1));
  if (m.topk_method == moe_topk_method::group_limited_greedy) {
    if (m.num_experts % m.num_groups != 0)
      return r.bad("n_group", fmt::format("a divisor of n_routed_experts ({})", m.num_experts));
    if (m.topk_groups > m.num_groups) return r.bad("topk_group", fmt::format("at most n_group ({})", m.num_groups));
    if (m.top_k > m.topk_groups * m.experts_per_group())
      return r.bad("num_experts_per_tok", fmt::format("at most topk_group x experts per group ({})",
                                                      m.topk_groups * m.experts_per_group()));
  } else {
    m.num_groups = 1;   // greedy ignores the groups
    m.topk_groups = 1;
  }
  int64_t first_dense = 0, freq = 1;
  AS_TRY(r.get_int("first_k_dense_replace", first_dense, false, 0));
  AS_TRY(r.get_int("moe_layer_freq", freq, false, 1));
  m.sparse_layers.assign(static_cast<size_t>(cfg.num_layers), false);
  for (int64_t i = first_dense; i < cfg.num_layers; ++i) m.sparse_layers[static_cast<size_t>(i)] = i % freq == 0;
  return {};
}

}  // namespace

const char* to_string(moe_scoring s) { return s == moe_scoring::softmax ? "softmax" : "sigmoid"; }

const char* to_string(moe_topk_method m) {
  return m == moe_topk_method::greedy ? "greedy" : "group_limited_greedy";
}

status parse_moe_keys(const json_obj& r, model_config& cfg) {
  moe_config m;
  if (cfg.architecture == "MixtralForCausalLM") {
    AS_TRY(parse_mixtral(r, cfg, m));
  } else if (cfg.architecture == "Qwen3MoeForCausalLM") {
    AS_TRY(parse_qwen3_moe(r, cfg, m));
  } else if (cfg.architecture == "DeepseekV2ForCausalLM") {
    AS_TRY(parse_deepseek_v2(r, cfg, m));
  } else {
    return {};
  }
  if (m.top_k > m.num_experts)
    return r.bad("num_experts_per_tok", fmt::format("at most the number of experts ({})", m.num_experts));
  if (m.num_experts > 4096 || m.expert_intermediate_size > (1 << 22) || m.num_shared_experts > 64)
    return make_error(error_code::unsupported, fmt::format("{}: expert counts or sizes are implausibly large", *r.file));
  cfg.moe = std::move(m);
  return {};
}

}  // namespace actorserve
