#include "config/model_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "config/json_fields.hpp"
#include "config/model_config_parse.hpp"

namespace actorserve {
namespace {

/// YaRN's keys as transformers reads them: beta_fast / beta_slow default to 32 / 1 (also when 0),
/// mscale and mscale_all_dim count only when non-zero, attention_factor overrides the one they imply.
status parse_yarn(const json_obj& r, rope_config& rope) {
  auto non_negative = [&](const char* key, double& out) -> status {
    AS_TRY(r.get_double(key, out));
    if (out < 0) return r.bad(key, "a non-negative number");
    return {};
  };
  AS_TRY(non_negative("beta_fast", rope.beta_fast));
  AS_TRY(non_negative("beta_slow", rope.beta_slow));
  if (rope.beta_fast == 0) rope.beta_fast = 32.0;
  if (rope.beta_slow == 0) rope.beta_slow = 1.0;
  AS_TRY(non_negative("mscale", rope.mscale));
  AS_TRY(non_negative("mscale_all_dim", rope.mscale_all_dim));
  if (r.find("attention_factor")) {
    double af = 0;
    AS_TRY(r.get_double("attention_factor", af, true));
    if (!(af > 0)) return r.bad("attention_factor", "positive");
    rope.attention_factor = af;
  }
  AS_TRY(r.get_bool("truncate", rope.truncate));
  return {};
}

status parse_rope(const json_obj& top, model_config& cfg) {
  // transformers 5: rope_parameters {rope_theta, rope_type, ...}; older: rope_theta + rope_scaling.
  AS_TRY(top.get_double("rope_theta", cfg.rope.theta, false));
  const char* section = "rope_scaling";
  auto params = top.find("rope_parameters");
  if (params) section = "rope_parameters";
  else params = top.find("rope_scaling");
  if (!params) {
    if (!(cfg.rope.theta > 0)) return top.bad("rope_theta", "positive");
    return {};
  }
  dom::object obj;
  if (params->get_object().get(obj) != simdjson::SUCCESS) return top.bad(section, "an object");
  json_obj r{obj, top.file, std::string(section) + "."};
  AS_TRY(r.get_double("rope_theta", cfg.rope.theta, false));
  std::string type;
  AS_TRY(r.get_string("rope_type", type));
  if (type.empty()) AS_TRY(r.get_string("type", type));
  if (type.empty() || type == "default") {
    cfg.rope.kind = rope_kind::default_rope;
  } else if (type == "linear") {
    cfg.rope.kind = rope_kind::linear;
  } else if (type == "dynamic") {
    cfg.rope.kind = rope_kind::dynamic;
  } else if (type == "llama3") {
    cfg.rope.kind = rope_kind::llama3;
  } else if (type == "yarn") {
    cfg.rope.kind = rope_kind::yarn;
  } else {
    return make_error(error_code::unsupported,
                      fmt::format("{}: {}.rope_type '{}' is not supported (default, linear, dynamic, llama3, yarn)",
                                  *top.file, section, type));
  }
  if (cfg.rope.kind != rope_kind::default_rope) {
    AS_TRY(r.get_double("factor", cfg.rope.factor, true));
    if (cfg.rope.factor <= 0) return r.bad("factor", "positive");
  }
  AS_TRY(r.get_double("low_freq_factor", cfg.rope.low_freq_factor, false));
  AS_TRY(r.get_double("high_freq_factor", cfg.rope.high_freq_factor, false));
  AS_TRY(r.get_int("original_max_position_embeddings", cfg.rope.original_max_position_embeddings,
                   cfg.rope.kind == rope_kind::llama3, 1));
  if (cfg.rope.kind == rope_kind::llama3 && cfg.rope.high_freq_factor <= cfg.rope.low_freq_factor)
    return r.bad("high_freq_factor", "greater than low_freq_factor");
  if (cfg.rope.kind == rope_kind::yarn) AS_TRY(parse_yarn(r, cfg.rope));
  if (!(cfg.rope.theta > 0)) return top.bad("rope_theta", "positive");
  return {};
}

/// The architectures config.json may name, with the model_type that implies each.
struct known_architecture {
  const char* name;
  const char* model_type;
};
constexpr known_architecture known_architectures[] = {
    {"LlamaForCausalLM", "llama"},          {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},          {"Qwen3ForCausalLM", "qwen3"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"},   {"MixtralForCausalLM", "mixtral"},
    {"DeepseekV2ForCausalLM", "deepseek_v2"},
};

status parse_architecture(const json_obj& r, model_config& cfg) {
  AS_TRY(r.get_string("model_type", cfg.model_type));
  if (auto arch = r.find("architectures")) {
    dom::array arr;
    std::string_view name;
    if (arch->get_array().get(arr) != simdjson::SUCCESS || arr.size() == 0 ||
        arr.at(0).get_string().get(name) != simdjson::SUCCESS)
      return r.bad("architectures", "a non-empty list of strings");
    cfg.architecture = std::string(name);
  } else {
    for (const auto& a : known_architectures)
      if (cfg.model_type == a.model_type) cfg.architecture = a.name;
    if (cfg.architecture.empty()) return r.missing("architectures");
  }
  for (const auto& a : known_architectures)
    if (cfg.architecture == a.name) return {};
  std::string known;
  for (const auto& a : known_architectures) known += fmt::format("{}{}", known.empty() ? "" : ", ", a.name);
  return make_error(error_code::unsupported,
                    fmt::format("{}: architecture '{}' is not supported ({})", *r.file, cfg.architecture, known));
}

status parse_shapes(const json_obj& r, model_config& cfg) {
  AS_TRY(r.get_int("vocab_size", cfg.vocab_size, true, 1));
  AS_TRY(r.get_int("hidden_size", cfg.hidden_size, true, 1));
  AS_TRY(r.get_int("intermediate_size", cfg.intermediate_size, true, 1));
  AS_TRY(r.get_int("num_hidden_layers", cfg.num_layers, true, 1));
  AS_TRY(r.get_int("num_attention_heads", cfg.num_heads, true, 1));
  cfg.num_kv_heads = cfg.num_heads;
  AS_TRY(r.get_int("num_key_value_heads", cfg.num_kv_heads, false, 1));
  if (cfg.num_heads % cfg.num_kv_heads != 0)
    return r.bad("num_key_value_heads", "a divisor of num_attention_heads");
  cfg.head_dim = 0;
  // Qwen3's head_dim is not hidden_size / num_attention_heads in general (its default is 128);
  // DeepSeek-V2's is its rope width, whatever config.json says (parse_mla_keys).
  const bool qwen3 = cfg.architecture == "Qwen3ForCausalLM" || cfg.architecture == "Qwen3MoeForCausalLM";
  const bool mla = cfg.architecture == "DeepseekV2ForCausalLM";
  if (!mla) AS_TRY(r.get_int("head_dim", cfg.head_dim, qwen3, 1));
  if (cfg.head_dim == 0 && !mla) {
    if (cfg.hidden_size % cfg.num_heads != 0) return r.bad("hidden_size", "a multiple of num_attention_heads");
    cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  }
  if (cfg.head_dim % 2 != 0) return r.bad("head_dim", "even");
  if (cfg.vocab_size > INT32_MAX || cfg.hidden_size > (1 << 20) || cfg.head_dim > 4096 ||
      cfg.intermediate_size > (1 << 22) || cfg.num_layers > 4096 || cfg.num_heads > 4096)
    return make_error(error_code::unsupported, fmt::format("{}: model dimensions are implausibly large", *r.file));
  cfg.max_position_embeddings = 2048;
  AS_TRY(r.get_int("max_position_embeddings", cfg.max_position_embeddings, false, 1));
  AS_TRY(r.get_double("rms_norm_eps", cfg.rms_norm_eps, false));
  if (!(cfg.rms_norm_eps > 0)) return r.bad("rms_norm_eps", "positive");
  return {};
}

status parse_features(const json_obj& r, model_config& cfg) {
  AS_TRY(r.get_string("hidden_act", cfg.hidden_act));
  if (cfg.hidden_act != "silu")
    return make_error(error_code::unsupported,
                      fmt::format("{}: hidden_act '{}' is not supported (only silu)", *r.file, cfg.hidden_act));
  AS_TRY(r.get_bool("tie_word_embeddings", cfg.tie_word_embeddings));
  bool attention_bias = false;
  AS_TRY(r.get_bool("attention_bias", attention_bias));
  if (cfg.architecture == "Qwen2ForCausalLM") {
    cfg.qkv_bias = true;
    cfg.o_bias = false;
  } else {
    cfg.qkv_bias = attention_bias;
    cfg.o_bias = attention_bias;
  }
  cfg.qk_norm = cfg.architecture == "Qwen3ForCausalLM" || cfg.architecture == "Qwen3MoeForCausalLM";
  bool mlp_bias = false;
  AS_TRY(r.get_bool("mlp_bias", mlp_bias));
  if (mlp_bias)
    return make_error(error_code::unsupported, fmt::format("{}: mlp_bias true is not supported", *r.file));
  // Mistral and Mixtral always apply a set sliding_window; Qwen2 and Qwen3-MoE only with
  // use_sliding_window (transformers then applies it to every layer).
  bool use_sliding = cfg.architecture == "MistralForCausalLM" || cfg.architecture == "MixtralForCausalLM";
  AS_TRY(r.get_bool("use_sliding_window", use_sliding));
  int64_t window = 0;
  AS_TRY(r.get_int("sliding_window", window, false, 1));
  // NOTE: Qwen3's sliding layers are those from max_window_layers on (layer_types), a per-layer
  // window this engine does not have.
  if (use_sliding && window > 0 && cfg.architecture == "Qwen3ForCausalLM")
    return make_error(error_code::unsupported,
                      fmt::format("{}: field 'use_sliding_window' true is not supported for Qwen3ForCausalLM", *r.file));
  if (use_sliding && window > 0) cfg.sliding_window = window;
  AS_TRY(r.get_string("torch_dtype", cfg.torch_dtype));
  AS_TRY(r.get_string("dtype", cfg.torch_dtype));
  if (cfg.torch_dtype != "float32" && cfg.torch_dtype != "bfloat16" && cfg.torch_dtype != "float16")
    return make_error(error_code::unsupported,
                      fmt::format("{}: dtype '{}' is not supported (float32, bfloat16, float16)", *r.file,
                                  cfg.torch_dtype));
  std::vector<int32_t> bos;
  AS_TRY(r.get_id_list("bos_token_id", bos));
  if (!bos.empty()) cfg.bos_token_id = bos.front();
  AS_TRY(r.get_id_list("eos_token_id", cfg.eos_token_ids));
  return {};
}

result<std::string> read_text(const std::string& path, bool& exists) {
  std::ifstream in(path, std::ios::binary);
  exists = static_cast<bool>(in);
  if (!in) return make_error(error_code::not_found, fmt::format("{}: cannot open file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The sampling keys vLLM takes from generation_config.json as request defaults.
status read_generation_defaults(const json_obj& g, generation_defaults& d) {
  auto opt_double = [&](const char* key, std::optional<double>& out) -> status {
    if (!g.find(key)) return {};
    double v = 0;
    AS_TRY(g.get_double(key, v, true));
    out = v;
    return {};
  };
  auto opt_int = [&](const char* key, std::optional<int64_t>& out, int64_t min_value) -> status {
    if (!g.find(key)) return {};
    int64_t v = 0;
    AS_TRY(g.get_int(key, v, true, min_value));
    out = v;
    return {};
  };
  AS_TRY(opt_double("temperature", d.temperature));
  AS_TRY(opt_double("top_p", d.top_p));
  AS_TRY(opt_double("min_p", d.min_p));
  AS_TRY(opt_double("repetition_penalty", d.repetition_penalty));
  AS_TRY(opt_int("max_new_tokens", d.max_new_tokens, 1));
  AS_TRY(opt_int("top_k", d.top_k, std::numeric_limits<int64_t>::min()));  // may be negative (-1: off)
  return {};
}

}  // namespace

const char* to_string(rope_kind k) {
  switch (k) {
    case rope_kind::default_rope: return "default";
    case rope_kind::linear: return "linear";
    case rope_kind::dynamic: return "dynamic";
    case rope_kind::llama3: return "llama3";
    case rope_kind::yarn: return "yarn";
  }
  return "?";
}

namespace {

result<model_config> parse_config_files(const std::string& config_json, const std::string& generation_json,
                                        const std::string& dir_for_errors) {
  const std::string cfg_file = dir_for_errors + "/config.json";
  dom::parser parser;
  dom::element root;
  dom::object obj;
  if (parser.parse(config_json).get(root) != simdjson::SUCCESS || root.get_object().get(obj) != simdjson::SUCCESS)
    return make_error(error_code::malformed_file, fmt::format("{}: not a JSON object", cfg_file));
  model_config cfg;
  json_obj r{obj, &cfg_file, ""};
  AS_TRY(parse_architecture(r, cfg));
  AS_TRY(parse_shapes(r, cfg));
  AS_TRY(parse_features(r, cfg));
  AS_TRY(parse_moe_keys(r, cfg));
  AS_TRY(parse_mla_keys(r, cfg));
  AS_TRY(parse_rope(r, cfg));
  if (cfg.rope.original_max_position_embeddings == 0)
    cfg.rope.original_max_position_embeddings = cfg.max_position_embeddings;
  if (!generation_json.empty()) {
    const std::string gen_file = dir_for_errors + "/generation_config.json";
    dom::parser gen_parser;
    dom::element gen_root;
    dom::object gen_obj;
    if (gen_parser.parse(generation_json).get(gen_root) != simdjson::SUCCESS ||
        gen_root.get_object().get(gen_obj) != simdjson::SUCCESS)
      return make_error(error_code::malformed_file, fmt::format("{}: not a JSON object", gen_file));
    json_obj g{gen_obj, &gen_file, ""};
    std::vector<int32_t> gen_eos;
    AS_TRY(g.get_id_list("eos_token_id", gen_eos));
    // generation_config.json's ids come first; config.json's are kept when not already listed.
    for (int32_t id : cfg.eos_token_ids)
      if (std::find(gen_eos.begin(), gen_eos.end(), id) == gen_eos.end()) gen_eos.push_back(id);
    cfg.eos_token_ids = std::move(gen_eos);
    std::vector<int32_t> bos;
    AS_TRY(g.get_id_list("bos_token_id", bos));
    if (!bos.empty()) cfg.bos_token_id = bos.front();
    AS_TRY(read_generation_defaults(g, cfg.sampling_defaults));
  }
  for (int32_t id : cfg.eos_token_ids)
    if (id >= cfg.vocab_size)
      return make_error(error_code::malformed_file,
                        fmt::format("{}: eos_token_id {} is outside the vocabulary ({})", cfg_file, id, cfg.vocab_size));
  return cfg;
}

}  // namespace

result<model_config> parse_model_config(const std::string& config_json, const std::string& generation_json,
                                        const std::string& dir_for_errors) {
  return parse_config_files(config_json, generation_json, dir_for_errors);
}

result<model_config> load_model_config(const std::string& model_dir) {
  bool exists = false;
  auto config_text = read_text(model_dir + "/config.json", exists);
  if (!config_text) return config_text.err();
  auto gen_text = read_text(model_dir + "/generation_config.json", exists);
  std::string gen = gen_text ? std::move(gen_text).value() : std::string();
  if (exists && gen.empty())
    return make_error(error_code::malformed_file, fmt::format("{}/generation_config.json: empty file", model_dir));
  return parse_model_config(config_text.value(), gen, model_dir);
}

}  // namespace actorserve
