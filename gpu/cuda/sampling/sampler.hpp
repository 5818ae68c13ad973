#pragma once
/// The device sampler: per-sequence controls, outputs and penalties (the CPU sampler's
/// semantics, gpu/sampling/).
/// Launchers are plain C++ (no device code): callable from .cpp files. Each enqueues on `stream`
/// and returns the launch's cudaError_t as an int (0 = success).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace actorserve::gpu::cuda {

/// Per-sequence sampling controls for the device sampler.
struct sample_seq {
  float temperature = 0.0f;          ///< < 1e-5: greedy
  float top_p = 1.0f;
  int32_t top_k = -1;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t num_logprobs = 0;          ///< top logprobs wanted (0..max_top_logprobs)
  uint64_t seed = 0;
  uint64_t counter = 0;              ///< num_generated
  int32_t penalty_begin = 0, penalty_count = 0;  ///< entries in `penalty_tokens`
  int32_t mask_begin = 0, mask_count = 0;        ///< ids forced to -inf in `mask_ids`
  int32_t grammar_row = -1;          ///< row of `grammar_masks` (-1: no grammar, nothing masked)
};

/// Words of one grammar mask row: 32 tokens per word, token i allowed when bit i % 32 of word
/// i / 32 is set (gpu::token_mask's layout, XGrammar's).
inline constexpr int grammar_mask_words(int vocab) { return (vocab + 31) / 32; }

/// The most top logprobs the device sampler returns per sequence.
inline constexpr int max_top_logprobs = 20;

/// What the sampler writes per sequence.
struct sample_out {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t top_ids[max_top_logprobs];
  float top_logprobs[max_top_logprobs];
};

/// One token the penalties touch: id, whether it is anywhere in prompt + output (repetition),
/// and how often it occurs in the output (presence, frequency).
struct penalty_token {
  int32_t id = 0;
  int32_t in_history = 0;
  int32_t output_count = 0;
};

/// Samples one token per row of logits ([num_seqs, vocab] fp32, modified in place), the CPU
/// sampler's semantics and order: the grammar mask (every token outside row `grammar_row` of
/// `grammar_masks`, [rows, grammar_mask_words(vocab)], -> -inf), penalties, the suppressed
/// ids, logprobs (before temperature), then greedy or temperature/top-k/top-p/min-p and one
/// counter-based draw. `grammar_masks` may be null when no sequence has a grammar_row.
int sample_tokens(float* logits, int num_seqs, int vocab, const sample_seq* seqs,
                  const penalty_token* penalty_tokens, const int32_t* mask_ids,
                  const uint32_t* grammar_masks, sample_out* out, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
