#pragma once
/// Token -> expert permutation for a mixture-of-experts layer (pure, tested directly): a step's
/// (token, slot) pairs, slot j of token t routed to experts[t * top_k + j], grouped by expert so
/// that each expert runs one GEMM over contiguous rows, and the inverse that brings the rows back.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace actorserve::gpu {

/// Permuted rows [begin, end).
struct row_range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool contains(size_t r) const { return r >= begin && r < end; }
};

struct expert_permutation {
  std::vector<int32_t> offsets;       ///< [num_experts + 1]: expert e's rows are [offsets[e], offsets[e + 1])
  std::vector<int32_t> source_token;  ///< [num_tokens * top_k]: the token each permuted row reads
  std::vector<int32_t> slot_row;      ///< [num_tokens * top_k]: the permuted row of (t, j) (the inverse)

  int32_t count(size_t expert) const { return offsets[expert + 1] - offsets[expert]; }
  size_t num_rows() const { return source_token.size(); }
  /// The rows of experts [first, last): contiguous, since rows are grouped by ascending expert.
  row_range rows_of(size_t first, size_t last) const {
    return {static_cast<size_t>(offsets[first]), static_cast<size_t>(offsets[last])};
  }
};

/// Groups the pairs by a stable counting sort: experts in ascending order, and within one expert
/// the pairs in ascending (token, slot) order. Reuses `out`'s buffers. Every id must be below
/// num_experts.
void permute_by_expert(std::span<const int32_t> experts, size_t top_k, size_t num_experts, expert_permutation& out);

/// out[r - rows.begin] = x[source_token[r]] for the permuted rows r in `rows`; rows of `width`
/// floats. An expert-parallel shard gathers only the rows of its experts.
void gather_rows(const float* x, size_t width, const expert_permutation& p, row_range rows, float* out);
/// Every permuted row.
inline void gather_rows(const float* x, size_t width, const expert_permutation& p, float* out) {
  gather_rows(x, width, p, {0, p.num_rows()}, out);
}

/// out[t] = sum over its slots j whose row r = slot_row[t * top_k + j] is in `rows` of
/// weights[t * top_k + j] * y[r - rows.begin], the slots summed in ascending expert order (as
/// transformers' loop over experts adds them), for tokens [t_begin, t_end); rows of `width`
/// floats. `out` rows are overwritten (zeros for a token none of whose rows is in `rows`).
void combine_rows(const float* y, size_t width, const expert_permutation& p, row_range rows, const float* weights,
                  size_t top_k, size_t t_begin, size_t t_end, float* out);
/// Every permuted row.
inline void combine_rows(const float* y, size_t width, const expert_permutation& p, const float* weights,
                         size_t top_k, size_t t_begin, size_t t_end, float* out) {
  combine_rows(y, width, p, {0, p.num_rows()}, weights, top_k, t_begin, t_end, out);
}

}  // namespace actorserve::gpu
