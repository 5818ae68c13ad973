#pragma once
/// config.json's `quantization_config` for the FP8 checkpoints Hugging Face models ship, as a plain
/// struct: `quant_method` "fp8" (per-tensor `weight_scale`, optional static `input_scale`, or 128 x 128
/// blocks with `weight_scale_inv` and `weight_block_size`) and "compressed-tensors" (config groups
/// of FP8 E4M3 weights per tensor, per channel or per block, each targeting Linear, module names or
/// re: patterns, and an FP8 KV-cache scheme of one scale per tensor). Everything else is refused
/// with an error naming the key and its value (docs/fp8.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace actorserve {

enum class quant_method { fp8, compressed_tensors };
/// How a weight's scale broadcasts: one per tensor, one per output channel (row), one per block.
enum class fp8_weight_granularity { per_tensor, per_channel, block };
/// Activation quantization the checkpoint was calibrated for: none (weight-only), computed per
/// step (dynamic), or from stored `input_scale` tensors (static).
enum class fp8_activation_scheme { none, dynamic, static_scale };

/// How the linear modules of one group are stored and were calibrated.
struct fp8_scheme {
  fp8_weight_granularity weights = fp8_weight_granularity::per_tensor;
  int64_t block_rows = 0, block_cols = 0;      ///< block: [output, input] elements per scale
  fp8_activation_scheme activations = fp8_activation_scheme::dynamic;
};

/// The modules one scheme covers: a compressed-tensors config group, or fp8's whole config (one
/// group targeting Linear).
struct fp8_group {
  std::string name;                  ///< its key under config_groups ("fp8" for quant_method fp8)
  /// "Linear" (every linear module), module names (matched as `ignore` matches them) or
  /// "re:REGEX" patterns matched from the name's start.
  std::vector<std::string> targets;
  fp8_scheme scheme;
};

struct quantization_config {
  quant_method method = quant_method::fp8;
  std::vector<fp8_group> groups;                    ///< at least one
  std::string weight_scale_name = "weight_scale";   ///< the scale tensor's suffix ("weight_scale_inv" for fp8 blocks)
  /// Modules that stay unquantized (fp8's `ignored_layers` / `modules_to_not_convert`,
  /// compressed-tensors' `ignore`): a module name, a suffix of one after a dot, a parent module,
  /// or "re:REGEX" matched from the name's start.
  std::vector<std::string> ignore;
  /// compressed-tensors' kv_cache_scheme (FP8 E4M3, one static scale per tensor): each layer's
  /// self_attn.k_scale / v_scale were calibrated for an FP8 cache. They apply where the cache is
  /// FP8 (--kv-cache-dtype fp8, which reads those tensors for any checkpoint), as in vLLM.
  bool kv_cache_scales = false;

  /// Whether the ignore list keeps the linear module `module` (e.g. "model.layers.0.mlp.up_proj")
  /// unquantized.
  bool ignores(const std::string& module) const;
  /// The scheme `module` is stored in, as vLLM picks it: the group whose target names the module
  /// wins over one whose re: pattern matches it, which wins over one targeting Linear; null where
  /// the module stays unquantized (ignored, or no group targets it). Two groups that target it
  /// alike are an error naming both.
  result<const fp8_scheme*> scheme_for(const std::string& module) const;
};

/// The start-up warning for a checkpoint with kv_cache_scales whose cache is not FP8 (its scales
/// unused): the cache's dtype as `cache_dtype` names it.
std::string kv_cache_scheme_unused(std::string_view cache_dtype);

/// Names as config.json spells them.
const char* to_string(quant_method m);
const char* to_string(fp8_weight_granularity g);
const char* to_string(fp8_activation_scheme a);

}  // namespace actorserve
