#pragma once
/// config.json's `quantization_config` for the FP8 checkpoints Hugging Face models ship, as a plain
/// struct: `quant_method` "fp8" (per-tensor `weight_scale`, optional static `input_scale`, or 128 x 128
/// blocks with `weight_scale_inv` and `weight_block_size`) and "compressed-tensors" (one config
/// group of FP8 E4M3 weights per tensor, per channel or per block, and an FP8 KV-cache scheme of one
/// scale per tensor). Everything else is refused with an error naming the key and its value
/// (docs/fp8.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorserve {

enum class quant_method { fp8, compressed_tensors };
/// How a weight's scale broadcasts: one per tensor, one per output channel (row), one per block.
enum class fp8_weight_granularity { per_tensor, per_channel, block };
/// Activation quantization the checkpoint was calibrated for: none (weight-only), computed per
/// step (dynamic), or from stored `input_scale` tensors (static).
enum class fp8_activation_scheme { none, dynamic, static_scale };

struct quantization_config {
  quant_method method = quant_method::fp8;
  fp8_weight_granularity weights = fp8_weight_granularity::per_tensor;
  int64_t block_rows = 0, block_cols = 0;      ///< block: [output, input] elements per scale
  fp8_activation_scheme activations = fp8_activation_scheme::dynamic;
  std::string weight_scale_name = "weight_scale";   ///< the scale tensor's suffix ("weight_scale_inv" for fp8 blocks)
  /// Modules that stay unquantized (fp8's `ignored_layers` / `modules_to_not_convert`,
  /// compressed-tensors' `ignore`): a module name, a suffix of one after a dot, a parent module,
  /// or "re:REGEX" matched from the name's start.
  std::vector<std::string> ignore;
  /// compressed-tensors' kv_cache_scheme (FP8 E4M3, one static scale per tensor): each layer's
  /// self_attn.k_scale / v_scale were calibrated for an FP8 cache. They apply where the cache is
  /// FP8 (--kv-cache-dtype fp8, which reads those tensors for any checkpoint), as in vLLM.
  bool kv_cache_scales = false;

  /// Whether the linear module `module` (e.g. "model.layers.0.mlp.up_proj") stays unquantized.
  bool ignores(const std::string& module) const;
};

/// The start-up warning for a checkpoint with kv_cache_scales whose cache is not FP8 (its scales
/// unused): the cache's dtype as `cache_dtype` names it.
std::string kv_cache_scheme_unused(std::string_view cache_dtype);

/// Names as config.json spells them.
const char* to_string(quant_method m);
const char* to_string(fp8_weight_granularity g);
const char* to_string(fp8_activation_scheme a);

}  // namespace actorserve
