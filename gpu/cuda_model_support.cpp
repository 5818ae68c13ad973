#include "gpu/cuda_model_support.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorserve::gpu {

status check_cuda_model_support(const model_config& cfg, int64_t max_model_len) {
  // FP8 checkpoints load (cuda_model.hpp: per-tensor, per-channel and block-scaled E4M3 weights
  // of dense layers stay E4M3; experts and latent-attention projections are dequantized at load). A static input_scale is checked by the loader and not applied: activations stay
  // bf16/fp16, as the CPU's stay fp32. DeepSeek-V2's latent attention, group-limited routing,
  // shared experts and YaRN rope run on the CUDA executor (gpu/cuda/mla/, gpu/cuda/moe/).
  const int64_t context = max_model_len > 0 ? max_model_len : cfg.max_position_embeddings;
  // NOTE: position p attends to keys p - window + 1 .. p, so a window of at least the context
  // never masks anything and full attention computes the same function. The attention backends
  // mask a shorter window (attention_shape::window); latent attention has no window.
  if (cfg.sliding_window && *cfg.sliding_window < context && cfg.mla)
    return make_error(error_code::unsupported,
                      fmt::format("{}: sliding_window {} is smaller than --max-model-len {}, and the CUDA executor's "
                                  "multi-head latent attention has no sliding window; start with --max-model-len {} "
                                  "(or less), or with --device cpu",
                                  cfg.architecture, *cfg.sliding_window, context, *cfg.sliding_window));
  return {};
}

status check_cuda_fp8_options(const model_config& cfg, kv_cache_layout layout, bool kv_cache_fp8) {
  if (!kv_cache_fp8) return {};
  if (cfg.mla)
    return make_error(error_code::unsupported,
                      fmt::format("--kv-cache-dtype fp8: {} caches the latent of multi-head latent attention, which "
                                  "has no FP8 form here; start with --kv-cache-dtype auto (docs/fp8.md)",
                                  cfg.architecture));
  if (layout != kv_cache_layout::flash_decoding)
    return make_error(error_code::unsupported,
                      "--kv-cache-dtype fp8: the FP8 cache is read by the flash-decoding kernels only; start with "
                      "--paged-kv-cache-type flash-decoding (and a --block-size from 64 to 256), with "
                      "--kv-cache-dtype auto, or with --device cpu (docs/fp8.md)");
  const int64_t group = cfg.num_kv_heads > 0 ? cfg.num_heads / cfg.num_kv_heads : 0;
  if ((cfg.head_dim != 64 && cfg.head_dim != 128) || group < 1 || group > 8)
    return make_error(error_code::unsupported,
                      fmt::format("--kv-cache-dtype fp8: head_dim {} with {} query heads per KV head runs on the "
                                  "generic attention kernel, which reads a 16-bit cache only (the FP8 cache takes "
                                  "head dims 64 and 128 and groups up to 8); start with --kv-cache-dtype auto, or "
                                  "with --device cpu (docs/fp8.md)",
                                  cfg.head_dim, group));
  return {};
}

int64_t dense_mlp_width(const model_config& cfg, int64_t shared_width) {
  bool dense_layer = false;
  for (int64_t l = 0; l < cfg.num_layers && !dense_layer; ++l) dense_layer = !cfg.is_sparse_layer(l);
  return std::max(dense_layer ? cfg.intermediate_size : int64_t{0}, shared_width);
}

}  // namespace actorserve::gpu
