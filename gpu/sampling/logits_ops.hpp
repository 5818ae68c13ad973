#pragma once
/// The building blocks of the CPU sampler, each a pass over one sequence's vocab-sized logits.
/// Exposed separately so tests (and the CUDA sampler's reference checks) can use them directly.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "config/sampling_params.hpp"

namespace actorserve::gpu {

/// Applies repetition (over all of `history`), presence and frequency (over
/// history[prompt_len:]) penalties in place, vLLM order. Ids outside the vocab are ignored.
void apply_penalties(std::span<float> logits, const sampling_params& params,
                     std::span<const int32_t> history, int32_t prompt_len);

/// Adds each (id, bias) of `bias` to logits[id] (ids outside the vocab are ignored).
void add_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias);

/// Sets to -inf the logit of every token whose bit in `words` (a token_mask) is clear; tokens
/// past the words are masked too.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> words);

/// Sets the logits of `ids` (those inside the vocab) to -inf.
void mask_tokens(std::span<float> logits, std::span<const int32_t> ids);

/// Index of the largest logit, ties to the lowest id; NaN never wins. O(vocab).
int32_t argmax(std::span<const float> logits);

/// log(sum(exp(logits))) computed stably; -inf when every logit is -inf.
double log_sum_exp(std::span<const float> logits);

/// Sorts `ids` by `values`, best first, ties to the lowest id, NaN last (top_ids' order).
void sort_ids(std::span<const float> values, std::span<int32_t> ids);

/// Reorders `ids` so its first `n` are the best `n` (in no particular order), as nth_element.
void select_ids(std::span<const float> values, std::span<int32_t> ids, size_t n);

/// The best of `ids` (non-empty) in top_ids' order.
int32_t best_of(std::span<const float> values, std::span<const int32_t> ids);

/// Which rank-order prefix `mass_prefix` measures.
enum class prefix_rule {
  mass_before_below,     ///< ids whose weight before them is < target (a top-p nucleus)
  mass_through_at_most,  ///< ids whose weight up to and including them is <= target (a draw)
};

/// Length n of the longest prefix of `ids`, taken in top_ids' order of `values`, that obeys
/// `rule` for weights[id]; reorders `ids` so that its first n are those ids (in any order).
/// NOTE: a quickselect by mass: expected O(ids) rather than a sort.
size_t mass_prefix(std::span<const float> values, std::span<const float> weights,
                   std::span<int32_t> ids, double target, prefix_rule rule);

/// The `k` ids with the largest values, best first, ties to the lowest id. O(vocab log k).
std::vector<int32_t> top_ids(std::span<const float> values, size_t k);

}  // namespace actorserve::gpu
