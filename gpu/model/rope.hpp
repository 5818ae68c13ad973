#pragma once
/// Rotary position embedding frequencies for the rope types of model_config (pure math, shared by
/// the CPU and CUDA executors), YaRN's attention factors, and the two rotations transformers uses:
/// rotate_half (Llama family: dimension i pairs with i + head_dim/2) and interleaved pairs
/// (DeepSeek-V2: dimensions 2i and 2i+1 as one complex number), both with inv_freq[i].
#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.hpp"

namespace actorserve::gpu {

/// head_dim/2 inverse frequencies, computed in fp32 the way transformers does. `seq_len` matters
/// only for dynamic NTK scaling (the sequence length the frequencies must cover; HF recomputes
/// them once a sequence grows past original_max_position_embeddings).
std::vector<float> rope_inv_freq(const rope_config& rope, int64_t head_dim, int64_t seq_len = 0);

/// The inverse frequencies a model actually rotates with. transformers keeps inv_freq as a module
/// buffer, cast with the model: a bfloat16/float16 model in memory rotates with inv_freq rounded to
/// that dtype (then used in fp32), one loaded in float32 with the exact values. The references
/// disagree on which of the two the engine matches, so it follows them by architecture (see
/// rope_inv_freq_in_checkpoint_dtype); for float32 checkpoints both are the same.
std::vector<float> model_rope_inv_freq(const model_config& cfg, int64_t seq_len = 0);

/// Whether model_rope_inv_freq rounds inv_freq to the checkpoint's dtype. NOTE: the Llama
/// families (Llama, Mistral, Qwen2) do, as their reference does (llama-hd128-bf16, made from a
/// model cast to bfloat16 in memory: 1.5e-2 relative logit error at 1000 tokens with exact
/// values, 2e-6 rounded); the architectures added with the experts (Qwen3, Qwen3-MoE, Mixtral,
/// DeepSeek-V2) do not, as theirs do not (scripts/make_hf_references.py reloads the checkpoint in
/// float32: 3e-2 to 6e-2 rounded, 2e-6 exact on the bf16 fixtures).
bool rope_inv_freq_in_checkpoint_dtype(const model_config& cfg);

/// Rounds to the nearest value of `torch_dtype` ("bfloat16", "float16"; others unchanged).
float round_to_dtype(float x, const std::string& torch_dtype);

/// The factor transformers multiplies cos and sin with (`attention_scaling`): for YaRN the
/// explicit attention_factor, else mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both
/// are non-zero, else mscale(factor, 1); 1 for the other rope kinds.
double rope_attention_factor(const rope_config& rope);

/// What DeepSeek-V2's attention multiplies its softmax scale with (transformers'
/// yarn_apply_mscale): mscale(factor, mscale_all_dim)^2 for YaRN with a non-zero mscale_all_dim,
/// else 1.
double yarn_softmax_scale_factor(const rope_config& rope);

/// YaRN's magnitude correction: 1 + 0.1 * mscale * ln(scale) above scale 1, else 1.
double yarn_mscale(double scale, double mscale);

/// Whether the frequencies depend on the sequence length (dynamic NTK).
inline bool rope_depends_on_length(const rope_config& rope) { return rope.kind == rope_kind::dynamic; }

/// cos/sin of position * inv_freq (fp32 angle, as HF computes it) for half = inv_freq.size(), each
/// times `scale` (rope_attention_factor).
void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out, float* sin_out,
                  float scale = 1.0f);

/// Rotates one head vector of 2*half floats in place (rotate_half convention).
void apply_rope(float* x, const float* cos_v, const float* sin_v, int64_t half);

/// Rotates one head vector of 2*half floats in place with interleaved pairs: (x[2i], x[2i+1]) as
/// the complex number x[2i] + i x[2i+1], times cos[i] + i sin[i] (transformers' apply_rotary_emb
/// of DeepSeek-V2, view_as_complex).
void apply_rope_interleaved(float* x, const float* cos_v, const float* sin_v, int64_t half);

}  // namespace actorserve::gpu
