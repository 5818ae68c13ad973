#pragma once
/// Token -> expert permutation for a mixture-of-experts layer (pure, tested directly): a step's
/// (token, slot) pairs, slot j of token t routed to experts[t * top_k + j], grouped by expert so
/// that each expert runs one GEMM over contiguous rows, and the inverse that brings the rows back.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace actorserve::gpu {

struct expert_permutation {
  std::vector<int32_t> offsets;       ///< [num_experts + 1]: expert e's rows are [offsets[e], offsets[e + 1])
  std::vector<int32_t> source_token;  ///< [num_tokens * top_k]: the token each permuted row reads
  std::vector<int32_t> slot_row;      ///< [num_tokens * top_k]: the permuted row of (t, j) (the inverse)

  int32_t count(size_t expert) const { return offsets[expert + 1] - offsets[expert]; }
  size_t num_rows() const { return source_token.size(); }
};

/// Groups the pairs by a stable counting sort: experts in ascending order, and within one expert
/// the pairs in ascending (token, slot) order. Reuses `out`'s buffers. Every id must be below
/// num_experts.
void permute_by_expert(std::span<const int32_t> experts, size_t top_k, size_t num_experts, expert_permutation& out);

/// out[r] = x[source_token[r]] for every permuted row r; rows of `width` floats.
void gather_rows(const float* x, size_t width, const expert_permutation& p, float* out);

/// out[t] = sum over its slots j of weights[t * top_k + j] * y[slot_row[t * top_k + j]], the
/// slots summed in ascending expert order (as transformers' loop over experts adds them), for
/// tokens [t_begin, t_end); rows of `width` floats. `out` rows are overwritten.
void combine_rows(const float* y, size_t width, const expert_permutation& p, const float* weights, size_t top_k,
                  size_t t_begin, size_t t_end, float* out);

}  // namespace actorserve::gpu
