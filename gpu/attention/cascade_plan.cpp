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

/// The prefix tree of the candidates' shareable blocks, and the best choice of groups in it.
class prefix_tree {
 public:
  prefix_tree(std::vector<std::span<const int32_t>> prefix, int32_t block_size, int32_t min_blocks,
              const cascade_costs& costs)
      : prefix_(std::move(prefix)), block_size_(block_size), min_blocks_(min_blocks), costs_(costs) {}

  /// Appends the groups chosen among `members` to `out`.
  void choose(std::vector<int32_t> members, std::vector<cascade_group>& out) {
    std::vector<int32_t> order = std::move(members);
    const size_t root = build(order, 0, order.size(), 0);
    emit(root, order, out);
  }

 private:
  struct node {
    size_t lo, hi;          ///< members: order[lo, hi)
    int32_t depth;          ///< blocks they all share
    int64_t best = 0;       ///< bytes saved by the best choice within this node
    bool whole = false;     ///< that choice is one group of all its members
    std::vector<size_t> children;
  };

  int32_t block_at(int32_t seq, int32_t depth) const {
    const auto& p = prefix_[static_cast<size_t>(seq)];
    return depth < static_cast<int32_t>(p.size()) ? p[static_cast<size_t>(depth)] : -1;   // -1: ends here
  }

  /// The node of order[lo, hi), which share `depth` blocks; returns its index.
  size_t build(std::vector<int32_t>& order, size_t lo, size_t hi, int32_t depth) {
    const size_t self = nodes_.size();
    nodes_.push_back({lo, hi, depth});
    if (hi - lo < static_cast<size_t>(cascade_min_group_size)) return self;
    // Extend while every member has one more block and they all agree on it.
    for (;;) {
      const int32_t b = block_at(order[lo], depth);
      if (b < 0) break;
      bool same = true;
      for (size_t i = lo + 1; i < hi && same; ++i) same = block_at(order[i], depth) == b;
      if (!same) break;
      ++depth;
    }
    nodes_[self].depth = depth;
    int64_t children_best = 0;
    // Split by the block at `depth`; members whose prefix ends here stay alone.
    std::sort(order.begin() + static_cast<ptrdiff_t>(lo), order.begin() + static_cast<ptrdiff_t>(hi),
              [&](int32_t a, int32_t b) {
                const int32_t x = block_at(a, depth), y = block_at(b, depth);
                return x != y ? x < y : a < b;
              });
    for (size_t i = lo; i < hi;) {
      size_t j = i + 1;
      const int32_t b = block_at(order[i], depth);
      while (j < hi && block_at(order[j], depth) == b) ++j;
      if (b >= 0 && j - i >= static_cast<size_t>(cascade_min_group_size)) {
        const size_t child = build(order, i, j, depth + 1);
        nodes_[self].children.push_back(child);
        children_best += nodes_[child].best;
      }
      i = j;
    }
    node& n = nodes_[self];
    n.best = children_best;
    const int64_t size = static_cast<int64_t>(hi - lo), tokens = int64_t{depth} * block_size_;
    if (depth >= min_blocks_ && cascade_pays(size, tokens, costs_)) {
      const int64_t saved = per_sequence_prefix_bytes(size, tokens, costs_) - cascade_prefix_bytes(size, tokens, costs_);
      if (saved > children_best) {
        n.best = saved;
        n.whole = true;
      }
    }
    return self;
  }

  void emit(size_t index, const std::vector<int32_t>& order, std::vector<cascade_group>& out) const {
    const node& n = nodes_[index];
    if (!n.whole) {
      for (size_t c : n.children) emit(c, order, out);
      return;
    }
    cascade_group g;
    g.num_prefix_blocks = n.depth;
    g.seqs.assign(order.begin() + static_cast<ptrdiff_t>(n.lo), order.begin() + static_cast<ptrdiff_t>(n.hi));
    std::sort(g.seqs.begin(), g.seqs.end());
    out.push_back(std::move(g));
  }

  std::vector<std::span<const int32_t>> prefix_;
  int32_t block_size_, min_blocks_;
  cascade_costs costs_;
  std::vector<node> nodes_;
};

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
  prefix_tree(std::move(prefix), block_size, min_blocks, costs).choose(std::move(order), plan.groups);
  std::sort(plan.groups.begin(), plan.groups.end(),
            [](const cascade_group& a, const cascade_group& b) { return a.seqs.front() < b.seqs.front(); });
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (int32_t s : plan.groups[g].seqs) plan.group_of[static_cast<size_t>(s)] = static_cast<int32_t>(g);
  return plan;
}

}  // namespace actorserve::gpu
