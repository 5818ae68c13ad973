// config.json's quantization_config: vLLM's "fp8" (Fp8Config) and the FP8 schemes of
// "compressed-tensors", as their checkpoints write them.
#include "config/quantization_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/model_config_parse.hpp"

namespace actorserve {
namespace {

constexpr std::string_view section = "quantization_config";

/// The value as JSON, shortened, for messages.
std::string shown(dom::element e) {
  std::string s = simdjson::minify(e);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

error refuse(const json_obj& r, std::string_view key, const std::string& value, std::string_view why) {
  return make_error(error_code::unsupported, fmt::format("{}: field '{}{}' = {} is not supported ({})", *r.file,
                                                         r.path, key, value, why));
}

/// Every key of `r` must be one of `known`; an unknown key may change what the weights mean.
status only_known_keys(const json_obj& r, std::initializer_list<std::string_view> known) {
  for (dom::key_value_pair kv : r.obj)
    if (std::find(known.begin(), known.end(), kv.key) == known.end())
      return refuse(r, kv.key, shown(kv.value), "an unknown key may change what the stored weights mean");
  return {};
}

/// A key that must be absent, null or one of the given JSON values (as minified text).
status must_be(const json_obj& r, std::string_view key, std::initializer_list<std::string_view> allowed,
               std::string_view why) {
  auto e = r.find(key);
  if (!e) return {};
  const std::string v = simdjson::minify(*e);
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return {};
  return refuse(r, key, shown(*e), why);
}

/// A list of module names or "re:" patterns; each pattern must compile.
status get_module_list(const json_obj& r, std::string_view key, std::vector<std::string>& out) {
  auto e = r.find(key);
  if (!e) return {};
  dom::array arr;
  if (e->get_array().get(arr) != simdjson::SUCCESS) return r.bad(key, "a list of module names");
  for (dom::element item : arr) {
    std::string_view name;
    if (item.get_string().get(name) != simdjson::SUCCESS || name.empty()) return r.bad(key, "a list of module names");
    std::string entry(name);
    if (entry.rfind("re:", 0) == 0) {
      try {
        std::regex check(entry.substr(3));
      } catch (const std::regex_error&) {
        return r.bad(key, fmt::format("a list of module names or valid re: patterns ('{}' does not compile)", entry));
      }
    }
    out.push_back(std::move(entry));
  }
  return {};
}

/// [rows, cols] of positive integers.
status get_block(const json_obj& r, std::string_view key, int64_t& rows, int64_t& cols) {
  auto e = r.find(key);
  dom::array arr;
  if (!e || e->get_array().get(arr) != simdjson::SUCCESS || arr.size() != 2) return r.bad(key, "a list of two positive integers");
  int64_t v[2] = {0, 0};
  for (size_t i = 0; i < 2; ++i)
    if (arr.at(i).get_int64().get(v[i]) != simdjson::SUCCESS || v[i] < 1 || v[i] > 65536)
      return r.bad(key, "a list of two positive integers");
  rows = v[0];
  cols = v[1];
  return {};
}

/// `pattern` compiled, once a thread: a checkpoint's patterns are tried against every linear
/// module's name at load (tens of thousands with many experts). Parsing checked that they compile.
const std::regex& compiled(const std::string& pattern) {
  thread_local std::unordered_map<std::string, std::regex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::regex(pattern)).first;
  return it->second;
}

/// Whether the ignore-list entry or group target `entry` (a name or "re:REGEX") names `module`: the
/// name itself, its last components after a dot ("lm_head", "mlp.down_proj"), a parent module, or
/// a pattern matched from the name's start.
bool names_module(const std::string& entry, const std::string& module) {
  if (entry.rfind("re:", 0) == 0)
    return std::regex_search(module, compiled(entry.substr(3)), std::regex_constants::match_continuous);
  if (module == entry) return true;
  if (module.size() > entry.size() && module.compare(module.size() - entry.size(), entry.size(), entry) == 0 &&
      module[module.size() - entry.size() - 1] == '.')
    return true;
  return module.size() > entry.size() && module.compare(0, entry.size(), entry) == 0 && module[entry.size()] == '.';
}

/// How strongly `target` picks `module`, as vLLM orders them: 3 a module name, 2 a re: pattern,
/// 1 Linear, 0 not at all.
int target_rank(const std::string& target, const std::string& module) {
  if (target == "Linear") return 1;
  if (!names_module(target, module)) return 0;
  return target.rfind("re:", 0) == 0 ? 2 : 3;
}

/// vLLM's Fp8Config (and transformers' FineGrainedFP8Config): activation_scheme, ignored_layers or
/// modules_to_not_convert, weight_block_size, fmt.
status parse_fp8(const json_obj& r, quantization_config& q) {
  AS_TRY(only_known_keys(r, {"quant_method", "activation_scheme", "ignored_layers", "modules_to_not_convert",
                             "weight_block_size", "fmt"}));
  AS_TRY(must_be(r, "fmt", {"\"e4m3\""}, "only FP8 E4M3 weights load; E5M2 is not supported"));
  fp8_scheme& s = q.groups.emplace_back(fp8_group{.name = "fp8", .targets = {"Linear"}}).scheme;
  std::string scheme = "dynamic";
  AS_TRY(r.get_string("activation_scheme", scheme));
  if (scheme == "dynamic") s.activations = fp8_activation_scheme::dynamic;
  else if (scheme == "static") s.activations = fp8_activation_scheme::static_scale;
  else return refuse(r, "activation_scheme", fmt::format("\"{}\"", scheme), "dynamic or static");
  AS_TRY(get_module_list(r, "ignored_layers", q.ignore));
  AS_TRY(get_module_list(r, "modules_to_not_convert", q.ignore));
  if (r.find("weight_block_size")) {
    AS_TRY(get_block(r, "weight_block_size", s.block_rows, s.block_cols));
    s.weights = fp8_weight_granularity::block;
    q.weight_scale_name = "weight_scale_inv";
    if (s.activations == fp8_activation_scheme::static_scale)
      return refuse(r, "activation_scheme", "\"static\"",
                    "block-wise weights (weight_block_size) come with dynamic activations only, as in vLLM");
  }
  return {};
}

/// compressed-tensors' quantization arguments (a group's weights or input_activations, the
/// kv_cache_scheme): known keys only, 8-bit float, symmetric.
status check_float8_args(const json_obj& a) {
  AS_TRY(only_known_keys(a, {"num_bits", "type", "strategy", "symmetric", "dynamic", "group_size", "block_structure",
                             "actorder", "observer", "observer_kwargs", "zp_dtype", "scale_dtype"}));
  AS_TRY(must_be(a, "num_bits", {"8"}, "only 8-bit FP8 loads"));
  AS_TRY(must_be(a, "type", {"\"float\""}, "only FP8 (type float) loads; int schemes are not supported"));
  AS_TRY(must_be(a, "symmetric", {"true"}, "FP8 scales are symmetric"));
  AS_TRY(must_be(a, "group_size", {}, "group-wise FP8 is not supported"));
  AS_TRY(must_be(a, "actorder", {}, "activation ordering is an int4 scheme"));
  AS_TRY(must_be(a, "zp_dtype", {}, "FP8 has no zero points"));
  return {};
}

/// The quantization arguments under `key` of `r`, or nothing where the key is absent or null.
result<std::optional<json_obj>> optional_args(const json_obj& r, std::string_view key) {
  auto e = r.find(key);
  if (!e) return std::optional<json_obj>{};
  dom::object o;
  if (e->get_object().get(o) != simdjson::SUCCESS) return r.bad(key, "an object or null");
  const json_obj a = r.child(o, key);
  AS_TRY(check_float8_args(a));
  return std::optional<json_obj>{a};
}

status parse_ct_weights(const json_obj& w, fp8_scheme& q) {
  AS_TRY(check_float8_args(w));
  AS_TRY(must_be(w, "dynamic", {"false"}, "weights carry stored scales"));
  AS_TRY(must_be(w, "scale_dtype", {}, "scales are read in their stored dtype"));
  std::string strategy;
  AS_TRY(w.get_string("strategy", strategy));
  if (strategy == "tensor") {
    q.weights = fp8_weight_granularity::per_tensor;
  } else if (strategy == "channel") {
    q.weights = fp8_weight_granularity::per_channel;
  } else if (strategy == "block") {
    q.weights = fp8_weight_granularity::block;
    AS_TRY(get_block(w, "block_structure", q.block_rows, q.block_cols));
  } else {
    return refuse(w, "strategy", fmt::format("\"{}\"", strategy), "tensor, channel or block");
  }
  if (strategy != "block") AS_TRY(must_be(w, "block_structure", {}, "only the block strategy has blocks"));
  return {};
}

status parse_ct_inputs(const json_obj& r, fp8_scheme& q) {
  auto args = optional_args(r, "input_activations");
  if (!args) return args.err();
  if (!args.value()) {
    q.activations = fp8_activation_scheme::none;
    return {};
  }
  const json_obj& a = *args.value();
  AS_TRY(must_be(a, "block_structure", {}, "activations are quantized per tensor or per token"));
  bool dynamic = false;
  AS_TRY(a.get_bool("dynamic", dynamic));
  std::string strategy = "tensor";
  AS_TRY(a.get_string("strategy", strategy));
  if (strategy != "tensor" && strategy != "token")
    return refuse(a, "strategy", fmt::format("\"{}\"", strategy), "tensor or token");
  if (!dynamic && strategy != "tensor")
    return refuse(a, "strategy", fmt::format("\"{}\"", strategy), "static activation scales are per tensor");
  q.activations = dynamic ? fp8_activation_scheme::dynamic : fp8_activation_scheme::static_scale;
  return {};
}

/// compressed-tensors' kv_cache_scheme: FP8 E4M3 with one static scale per tensor, stored as each
/// layer's self_attn.k_scale / v_scale (llm-compressor's calibration); per-head, dynamic and
/// integer schemes are refused.
status parse_ct_kv_scheme(const json_obj& r, quantization_config& q) {
  auto args = optional_args(r, "kv_cache_scheme");
  if (!args) return args.err();
  if (!args.value()) return {};
  const json_obj& k = *args.value();
  AS_TRY(must_be(k, "block_structure", {}, "KV scales are per tensor"));
  AS_TRY(must_be(k, "dynamic", {"false"}, "the KV scales are read from the checkpoint's self_attn.k_scale / v_scale"));
  AS_TRY(must_be(k, "strategy", {"\"tensor\""},
                 "one KV scale per tensor loads; per-head or per-channel KV scales are not supported"));
  q.kv_cache_scales = true;
  return {};
}

/// compressed-tensors: config groups of FP8 weights (and optionally FP8 activations), each
/// targeting Linear, module names or re: patterns; no sparsity; an FP8 KV-cache scheme of one
/// scale per tensor.
status parse_compressed_tensors(const json_obj& r, quantization_config& q) {
  q.method = quant_method::compressed_tensors;
  AS_TRY(only_known_keys(r, {"quant_method", "format", "config_groups", "ignore", "kv_cache_scheme",
                             "quantization_status", "global_compression_ratio", "sparsity_config", "version",
                             "transform_config"}));
  AS_TRY(must_be(r, "format", {"\"float-quantized\"", "\"naive-quantized\""},
                 "float-quantized or naive-quantized FP8 weights only"));
  AS_TRY(must_be(r, "quantization_status", {"\"compressed\"", "\"frozen\""}, "compressed or frozen"));
  AS_TRY(parse_ct_kv_scheme(r, q));
  AS_TRY(must_be(r, "sparsity_config", {"{}"}, "sparse checkpoints are not supported"));
  AS_TRY(must_be(r, "transform_config", {"{}"}, "transformed (rotated) checkpoints are not supported"));
  AS_TRY(get_module_list(r, "ignore", q.ignore));
  auto groups_obj = r.get_object("config_groups");
  if (!groups_obj) return groups_obj.err();
  const json_obj& groups = groups_obj.value();
  if (groups.obj.size() == 0) return refuse(r, "config_groups", "{}", "at least one group of FP8 weights");
  for (dom::key_value_pair kv : groups.obj) {
    dom::object go;
    if (kv.value.get_object().get(go) != simdjson::SUCCESS) return groups.bad(kv.key, "an object");
    const json_obj g = groups.child(go, kv.key);
    AS_TRY(only_known_keys(g, {"targets", "weights", "input_activations", "output_activations", "format"}));
    AS_TRY(must_be(g, "output_activations", {}, "output activations are not quantized"));
    AS_TRY(must_be(g, "format", {"\"float-quantized\"", "\"naive-quantized\""},
                   "float-quantized or naive-quantized FP8 weights only"));
    fp8_group& group = q.groups.emplace_back(fp8_group{.name = std::string(kv.key)});
    AS_TRY(get_module_list(g, "targets", group.targets));
    if (group.targets.empty()) return g.bad("targets", "a non-empty list of targets");
    for (const std::string& t : group.targets)
      if (t != "Linear" && t.rfind("re:", 0) != 0 && t.find('.') == std::string::npos && t != "lm_head")
        return refuse(g, "targets", fmt::format("\"{}\"", t),
                      "targets are Linear, module names or re: patterns; other module classes are not matched");
    auto w = g.get_object("weights");
    if (!w) return w.err();
    AS_TRY(parse_ct_weights(w.value(), group.scheme));
    AS_TRY(parse_ct_inputs(g, group.scheme));
    if (group.scheme.weights == fp8_weight_granularity::block &&
        group.scheme.activations == fp8_activation_scheme::static_scale)
      return refuse(g, "input_activations", "static with block weights",
                    "block-wise weights come with dynamic activations only, as in vLLM");
  }
  return {};
}

}  // namespace

bool quantization_config::ignores(const std::string& module) const {
  return std::any_of(ignore.begin(), ignore.end(), [&](const std::string& e) { return names_module(e, module); });
}

result<const fp8_scheme*> quantization_config::scheme_for(const std::string& module) const {
  if (ignores(module)) return static_cast<const fp8_scheme*>(nullptr);
  const fp8_group* best = nullptr;
  int best_rank = 0;
  for (const fp8_group& g : groups) {
    int rank = 0;
    for (const std::string& t : g.targets) rank = std::max(rank, target_rank(t, module));
    if (rank == 0 || rank < best_rank) continue;
    if (rank == best_rank)
      return make_error(error_code::unsupported,
                        fmt::format("quantization_config: config groups '{}' and '{}' both target module {}; which "
                                    "scheme it is stored in is ambiguous", best->name, g.name, module));
    best = &g;
    best_rank = rank;
  }
  return best ? &best->scheme : nullptr;
}

std::string kv_cache_scheme_unused(std::string_view cache_dtype) {
  return fmt::format("the checkpoint's kv_cache_scheme (FP8 E4M3, one scale per tensor) is not used: the KV cache "
                     "stays {}; --kv-cache-dtype fp8 stores it in E4M3 with the checkpoint's self_attn.k_scale / "
                     "v_scale",
                     cache_dtype);
}

const char* to_string(quant_method m) { return m == quant_method::fp8 ? "fp8" : "compressed-tensors"; }

const char* to_string(fp8_weight_granularity g) {
  switch (g) {
    case fp8_weight_granularity::per_tensor: return "per-tensor";
    case fp8_weight_granularity::per_channel: return "per-channel";
    case fp8_weight_granularity::block: return "block";
  }
  return "?";
}

const char* to_string(fp8_activation_scheme a) {
  switch (a) {
    case fp8_activation_scheme::none: return "none";
    case fp8_activation_scheme::dynamic: return "dynamic";
    case fp8_activation_scheme::static_scale: return "static";
  }
  return "?";
}

status parse_quantization_keys(const json_obj& top, model_config& cfg) {
  auto e = top.find(section);
  if (!e) return {};
  dom::object o;
  if (e->get_object().get(o) != simdjson::SUCCESS) return top.bad(section, "an object");
  const json_obj r = top.child(o, section);
  std::string method;
  AS_TRY(r.get_string("quant_method", method));
  if (method.empty()) return r.missing("quant_method");
  quantization_config q;
  if (method == "fp8") {
    AS_TRY(parse_fp8(r, q));
  } else if (method == "compressed-tensors") {
    AS_TRY(parse_compressed_tensors(r, q));
  } else {
    return refuse(r, "quant_method", fmt::format("\"{}\"", method), "fp8 or compressed-tensors");
  }
  cfg.quantization = std::move(q);
  return {};
}

}  // namespace actorserve
