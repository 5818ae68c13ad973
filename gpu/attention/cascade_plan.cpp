#include "gpu/attention/cascade_plan.hpp"

#include <algorithm>

namespace actorserve::gpu {
namespace {

/// Leading blocks of a sequence that may be shared: whole blocks whose keys are all in the cache
/// before the step (so every query of the step sees all of them, and none is written now).
int32_t shareable_blocks(const cascade_input& s, int32_t block_size) {
  if (s.num_new != 1 || block_size <= 0) return 0;
  return std::min(static_cast<int32_t>(s.block_table.size()), s.num_computed / block_size);
}

int32_t common_blocks(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<int32_t>(std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(n), b.begin()).first -
                              a.begin());
}

}  // namespace

int64_t per_sequence_prefix_bytes(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c) {
  return group_size * prefix_tokens * c.kv_bytes_per_token;
}

int64_t cascade_prefix_bytes(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c) {
  return prefix_tokens * c.kv_bytes_per_token + group_size * c.merge_bytes_per_seq;
}

bool cascade_pays(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c) {
  if (group_size < cascade_min_group_size || prefix_tokens < cascade_min_prefix_tokens) return false;
  const double per_seq = static_cast<double>(per_sequence_prefix_bytes(group_size, prefix_tokens, c));
  const double cascade = static_cast<double>(cascade_prefix_bytes(group_size, prefix_tokens, c));
  return per_seq >= cascade_min_byte_ratio * cascade;
}

int32_t cascade_plan::num_grouped() const {
  int32_t n = 0;
  for (const auto& g : groups) n += static_cast<int32_t>(g.seqs.size());
  return n;
}

cascade_plan plan_cascade(std::span<const cascade_input> seqs, int32_t block_size, const cascade_costs& costs) {
  cascade_plan plan;
  plan.group_of.assign(seqs.size(), -1);
  const int32_t min_blocks = block_size > 0 ? (cascade_min_prefix_tokens + block_size - 1) / block_size : 0;
  // The candidates: decodes with enough shareable blocks, each viewed through those blocks only.
  std::vector<int32_t> order;
  std::vector<std::span<const int32_t>> prefix(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int32_t n = shareable_blocks(seqs[i], block_size);
    if (n < std::max(min_blocks, 1)) continue;
    prefix[i] = seqs[i].block_table.first(static_cast<size_t>(n));
    order.push_back(static_cast<int32_t>(i));
  }
  if (order.size() < static_cast<size_t>(cascade_min_group_size)) return plan;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const auto &x = prefix[static_cast<size_t>(a)], &y = prefix[static_cast<size_t>(b)];
    if (std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end())) return true;
    if (std::lexicographical_compare(y.begin(), y.end(), x.begin(), x.end())) return false;
    return a < b;
  });
  const size_t n = order.size();
  // lcp[i]: blocks sorted neighbours i - 1 and i share; a run's prefix is its smallest lcp.
  std::vector<int32_t> lcp(n, 0);
  for (size_t i = 1; i < n; ++i)
    lcp[i] = common_blocks(prefix[static_cast<size_t>(order[i - 1])], prefix[static_cast<size_t>(order[i])]);
  // saved[i]: the most bytes saved over the first i sorted sequences; cut[i]: where the last run
  // of that best split starts (cut[i] == i - 1 with blocks[i] == 0: sequence i - 1 alone).
  std::vector<int64_t> saved(n + 1, 0);
  std::vector<size_t> cut(n + 1, 0);
  std::vector<int32_t> blocks(n + 1, 0);
  for (size_t i = 1; i <= n; ++i) {
    saved[i] = saved[i - 1];
    cut[i] = i - 1;
    int32_t run_blocks = INT32_MAX;
    // Runs [j, i) for j = i - 2, i - 3, ...; stop once the shared prefix is below the floor.
    for (size_t j = i - 1; j-- > 0;) {
      run_blocks = std::min(run_blocks, lcp[j + 1]);
      if (run_blocks < min_blocks || run_blocks == 0) break;
      const int64_t size = static_cast<int64_t>(i - j), tokens = int64_t{run_blocks} * block_size;
      if (!cascade_pays(size, tokens, costs)) continue;
      const int64_t gain = saved[j] + per_sequence_prefix_bytes(size, tokens, costs) -
                           cascade_prefix_bytes(size, tokens, costs);
      if (gain > saved[i]) {
        saved[i] = gain;
        cut[i] = j;
        blocks[i] = run_blocks;
      }
    }
  }
  for (size_t i = n; i > 0; i = cut[i]) {
    if (blocks[i] == 0) continue;
    cascade_group g;
    g.num_prefix_blocks = blocks[i];
    for (size_t k = cut[i]; k < i; ++k) g.seqs.push_back(order[k]);
    std::sort(g.seqs.begin(), g.seqs.end());
    plan.groups.push_back(std::move(g));
  }
  std::sort(plan.groups.begin(), plan.groups.end(),
            [](const cascade_group& a, const cascade_group& b) { return a.seqs.front() < b.seqs.front(); });
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (int32_t s : plan.groups[g].seqs) plan.group_of[static_cast<size_t>(s)] = static_cast<int32_t>(g);
  return plan;
}

}  // namespace actorserve::gpu
