#include "gpu/model/expert_permutation.hpp"

#include <algorithm>
#include <cstring>

#include "config/check.hpp"

namespace actorserve::gpu {

void permute_by_expert(std::span<const int32_t> experts, size_t top_k, size_t num_experts, expert_permutation& out) {
  const size_t n = experts.size();
  AS_CHECK(top_k > 0 && n % top_k == 0, "permute_by_expert: pairs are not whole tokens");
  out.offsets.assign(num_experts + 1, 0);
  for (int32_t e : experts) {
    AS_CHECK(e >= 0 && static_cast<size_t>(e) < num_experts, "permute_by_expert: expert id out of range");
    ++out.offsets[static_cast<size_t>(e) + 1];
  }
  for (size_t e = 0; e < num_experts; ++e) out.offsets[e + 1] += out.offsets[e];
  out.source_token.resize(n);
  out.slot_row.resize(n);
  // NOTE: filling in pair order makes the sort stable: within one expert, rows follow (t, j).
  std::vector<int32_t> next(out.offsets.begin(), out.offsets.end() - 1);
  for (size_t i = 0; i < n; ++i) {
    const int32_t row = next[static_cast<size_t>(experts[i])]++;
    out.source_token[static_cast<size_t>(row)] = static_cast<int32_t>(i / top_k);
    out.slot_row[i] = row;
  }
}

void gather_rows(const float* x, size_t width, const expert_permutation& p, row_range rows, float* out) {
  for (size_t r = rows.begin; r < rows.end; ++r)
    std::memcpy(out + (r - rows.begin) * width, x + static_cast<size_t>(p.source_token[r]) * width,
                width * sizeof(float));
}

void combine_rows(const float* y, size_t width, const expert_permutation& p, row_range rows, const float* weights,
                  size_t top_k, size_t t_begin, size_t t_end, float* out) {
  // Rows are grouped by ascending expert, so ascending rows are ascending experts.
  std::vector<size_t> slots(top_k);
  for (size_t t = t_begin; t < t_end; ++t) {
    for (size_t j = 0; j < top_k; ++j) slots[j] = t * top_k + j;
    std::sort(slots.begin(), slots.end(), [&](size_t a, size_t b) { return p.slot_row[a] < p.slot_row[b]; });
    float* o = out + t * width;
    std::fill(o, o + width, 0.0f);
    for (size_t s : slots) {
      const size_t r = static_cast<size_t>(p.slot_row[s]);
      if (!rows.contains(r)) continue;
      const float w = weights[s];
      const float* row = y + (r - rows.begin) * width;
      for (size_t i = 0; i < width; ++i) o[i] += w * row[i];
    }
  }
}

}  // namespace actorserve::gpu
