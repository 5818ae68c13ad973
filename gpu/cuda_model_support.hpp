#pragma once
/// What the CUDA executor runs of a model config, decided on the host in every build (no CUDA
/// headers), so that a model it would compute wrongly is refused at start with the way around.
#include <cstdint>

#include "config/error.hpp"
#include "config/model_config.hpp"

namespace actorserve::gpu {

/// Ok when the CUDA executor computes `cfg` as transformers does at contexts up to
/// `max_model_len` tokens (0: the model's max_position_embeddings). Refused: FP8 checkpoints (no
/// CUDA kernels yet: --device cpu runs them), and a sliding_window smaller than the context (its
/// attention has no window: --max-model-len at most the window keeps every position inside it).
status check_cuda_model_support(const model_config& cfg, int64_t max_model_len);

/// Ok unless an FP8 option is asked of the CUDA executor (--quantization fp8, --kv-cache-dtype
/// fp8): its FP8 kernels are not written yet. An FP8 checkpoint (quantization_config) is refused
/// by check_cuda_model_support.
status check_cuda_fp8_options(bool quantize_fp8, bool kv_cache_fp8);

}  // namespace actorserve::gpu
