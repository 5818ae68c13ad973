#pragma once
/// Rotary position embedding frequencies for the rope types of model_config (pure math, shared by
/// the CPU and CUDA executors). Rotation follows HF's rotate_half convention: dimension i pairs
/// with i + head_dim/2, both using inv_freq[i].
#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.hpp"

namespace actorserve::gpu {

/// head_dim/2 inverse frequencies, computed in fp32 the way transformers does. `seq_len` matters
/// only for dynamic NTK scaling (the sequence length the frequencies must cover; HF recomputes
/// them once a sequence grows past original_max_position_embeddings).
std::vector<float> rope_inv_freq(const rope_config& rope, int64_t head_dim, int64_t seq_len = 0);

/// The inverse frequencies a model actually rotates with, as transformers computes them for a
/// checkpoint loaded in its own dtype: HF keeps inv_freq as a module buffer, which is cast with
/// the model, so a bfloat16/float16 checkpoint rotates with inv_freq rounded to that dtype (then
/// used in fp32). Matching the reference needs that rounding (measured: 1.5e-2 relative logit
/// error at 1000 tokens without it, 2e-6 with it, on llama-hd128-bf16).
std::vector<float> model_rope_inv_freq(const model_config& cfg, int64_t seq_len = 0);

/// Rounds to the nearest value of `torch_dtype` ("bfloat16", "float16"; others unchanged).
float round_to_dtype(float x, const std::string& torch_dtype);

/// Whether the frequencies depend on the sequence length (dynamic NTK).
inline bool rope_depends_on_length(const rope_config& rope) { return rope.kind == rope_kind::dynamic; }

/// cos/sin of position * inv_freq (fp32 angle, as HF computes it) for half = inv_freq.size().
void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out, float* sin_out);

/// Rotates one head vector of 2*half floats in place (rotate_half convention).
void apply_rope(float* x, const float* cos_v, const float* sin_v, int64_t half);

}  // namespace actorserve::gpu
