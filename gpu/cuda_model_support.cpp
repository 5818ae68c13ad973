#include "gpu/cuda_model_support.hpp"

#include <fmt/format.h>

namespace actorserve::gpu {

status check_cuda_model_support(const model_config& cfg, int64_t max_model_len) {
  if (cfg.quantization)
    return make_error(error_code::unsupported,
                      fmt::format("{} is an FP8 checkpoint (quantization_config: quant_method {}, {} weights), and the "
                                  "CUDA executor has no FP8 kernels yet; start with --device cpu, which dequantizes "
                                  "it to fp32 (docs/fp8.md)",
                                  cfg.architecture, to_string(cfg.quantization->method),
                                  to_string(cfg.quantization->weights)));
  const int64_t context = max_model_len > 0 ? max_model_len : cfg.max_position_embeddings;
  // NOTE: position p attends to keys p - window + 1 .. p, so a window of at least the context
  // never masks anything and full attention computes the same function.
  if (cfg.sliding_window && *cfg.sliding_window < context)
    return make_error(error_code::unsupported,
                      fmt::format("{}: sliding_window {} is smaller than --max-model-len {}, and the CUDA executor's "
                                  "attention has no sliding window; start with --max-model-len {} (or less), or with "
                                  "--device cpu",
                                  cfg.architecture, *cfg.sliding_window, context, *cfg.sliding_window));
  return {};
}

status check_cuda_fp8_options(bool quantize_fp8, bool kv_cache_fp8) {
  if (quantize_fp8)
    return make_error(error_code::unsupported,
                      "--quantization fp8: the CUDA executor has no FP8 GEMM kernels yet; start without it, or with "
                      "--device cpu (docs/fp8.md)");
  if (kv_cache_fp8)
    return make_error(error_code::unsupported,
                      "--kv-cache-dtype fp8: the CUDA executor's attention has no FP8 KV cache yet; start with "
                      "--kv-cache-dtype auto, or with --device cpu (docs/fp8.md)");
  return {};
}

}  // namespace actorserve::gpu
