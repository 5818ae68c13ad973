#pragma once
/// CPU token sampler, vLLM semantics, used by the CPU executor (and as the reference for CUDA).
///
/// Order of operations on one sequence's logits:
///  -. grammar: when `seq.allowed_tokens`, every token outside its mask -> -inf (waits for the
///     mask first: it may be filled after the step was submitted; see token_mask.hpp);
///  0. logit_bias: each (id, bias) added to the raw logit (as vLLM, before penalties);
///  1. penalties on the raw logits: repetition (HF-style: positive logits divided, negative
///     multiplied, over prompt + output tokens of `seq.history`), then presence and frequency
///     (subtracted, over output tokens only: history[prompt_len:]);
///  2. when `seq.suppress_eos` (min_tokens not reached): EOS ids and params.stop_token_ids -> -inf;
///  3. logprobs: `logprob` and `top_logprobs` are the log-softmax of the logits AFTER steps 1-2
///     and BEFORE temperature/top-k/top-p/min-p. NOTE: vLLM's default ("raw_logprobs") is before
///     penalties too; we report the processed-before-temperature values, which is what the
///     token was actually drawn from up to temperature and truncation;
///     num_logprobs < 0: `logprob` only; 0: the same; K > 0: plus the K best, best first.
///  4. temperature < 1e-5 (0 included): argmax (ties to the lowest id), O(vocab). Otherwise
///     temperature scaling, top-k, top-p (nucleus over the probabilities after top-k, keeps at
///     least one), min-p (relative to the max probability), then one draw. No step sorts the
///     vocab: top-k is a heap, top-p a bucketed quickselect by mass.
/// Randomness is counter-based, keyed by (seq.seed, seq.num_generated): the same seed gives the
/// same tokens, and a sequence recomputed after preemption samples exactly the same tokens
/// (counter_rng.hpp). NOTE: requests with n > 1 need a distinct seed per sample.
/// NaN logits are never sampled; a sequence whose logits are all masked gets its argmax.
#include <cstdint>
#include <span>

#include "config/sampling_params.hpp"
#include "gpu/executor.hpp"

namespace actorserve::gpu {

/// Samples one token from `logits` (vocab entries; modified in place as scratch) per seq.params,
/// seq.seed, seq.num_generated, seq.history/prompt_len and seq.suppress_eos; fills logprobs.
sampled_token sample_token(std::span<float> logits, const step_sequence& seq,
                           std::span<const int32_t> eos_token_ids);

}  // namespace actorserve::gpu
