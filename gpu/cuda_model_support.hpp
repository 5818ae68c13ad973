#pragma once
/// What the CUDA executor runs of a model config, decided on the host in every build (no CUDA
/// headers), so that a model it would compute wrongly is refused at start with the way around.
#include <cstdint>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "config/model_config.hpp"

namespace actorserve::gpu {

/// Ok when the CUDA executor computes `cfg` as transformers does at contexts up to
/// `max_model_len` tokens (0: the model's max_position_embeddings). A sliding_window smaller
/// than the context runs on every attention backend (cascade attention off); refused with
/// latent attention, which has no window (--max-model-len at most the window keeps every
/// position inside it). FP8 checkpoints and DeepSeek-V2 (latent attention, YaRN, group-limited
/// routing, shared experts) are accepted, together too.
status check_cuda_model_support(const model_config& cfg, int64_t max_model_len);

/// Ok unless --kv-cache-dtype fp8 (`kv_cache_fp8`) asks the CUDA executor for an FP8 cache its
/// kernels cannot read: latent attention (DeepSeek-V2), the vLLM layout (`layout`), or a head dim
/// other than 64 and 128 or a GQA group over 8 (the generic kernel). The flash-decoding layout
/// reads it (docs/fp8.md). FP8 checkpoints and --quantization fp8 load (FP8 E4M3 weights,
/// cuda_model.hpp).
status check_cuda_fp8_options(const model_config& cfg, kv_cache_layout layout, bool kv_cache_fp8);

/// Columns of the widest dense MLP the CUDA executor computes for `cfg`: intermediate_size when
/// some decoder layer has a dense MLP, else 0 (every layer sparse: Mixtral, most Qwen3-MoE), and
/// at least `shared_width` (DeepSeek-V2's shared experts run as a dense MLP beside the routed
/// ones). The executor sizes its gate/up and SiLU buffers from it (3 x width values per batched
/// token: about 9 GB at Mixtral's 14,336 columns and 65,536 tokens), so a model whose layers are
/// all sparse leaves that memory to the KV cache.
int64_t dense_mlp_width(const model_config& cfg, int64_t shared_width);

}  // namespace actorserve::gpu
