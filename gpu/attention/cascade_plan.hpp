#pragma once
/// Cascade attention's plan for one step: which decode sequences share a prefix of physical KV
/// blocks, and whether reading that prefix once for the whole group beats reading it once per
/// sequence. Prefix-cache hits and n > 1 forks give sequences block tables that start with the
/// same block ids; a group's queries then attend to those keys in one shared-prefix pass, each
/// sequence attends to its own suffix as usual, and the two partial results merge by their
/// log-sum-exp (docs/attention.md, "Cascade attention"). Plain code, used by both executors.
#include <cstdint>
#include <span>
#include <vector>

namespace actorserve::gpu {

/// One sequence of a step as the planner sees it.
struct cascade_input {
  std::span<const int32_t> block_table;  ///< the sequence's block ids
  int32_t num_computed = 0;              ///< keys in the cache before the step
  int32_t num_new = 0;                   ///< new tokens this step (1: a decode)
};

/// What the byte rule weighs, in bytes per layer.
struct cascade_costs {
  int64_t kv_bytes_per_token = 0;   ///< K and V of one token over the layer's KV heads
  /// One sequence's prefix partial (an output row and a log-sum-exp per query head) written by
  /// the shared-prefix pass and read back by the merge.
  int64_t merge_bytes_per_seq = 0;
};

/// A group has at least two sequences: one sequence alone has nothing to share.
inline constexpr int32_t cascade_min_group_size = 2;
/// A shared prefix of fewer keys stays on the per-sequence path: a few 64-key tiles are not
/// worth a pass of their own, whose fixed costs (a work item's cold start, a second launch on
/// the GPU) the byte count does not see. vLLM uses the same floor.
inline constexpr int32_t cascade_min_prefix_tokens = 256;
/// The per-sequence path must read at least this many times the cascade's bytes over the
/// prefix: a clear win, with room for what the bytes leave out (the merge's arithmetic, tile
/// rows left empty when a group's heads x sequences do not fill a tile). A group of 2 over a
/// long prefix (ratio just under 2) passes; a group of 2 over a short one does not.
inline constexpr double cascade_min_byte_ratio = 1.5;

/// Bytes the per-sequence path reads over a shared prefix: every sequence reads it.
int64_t per_sequence_prefix_bytes(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c);
/// Bytes the cascade reads over it: the prefix once, plus each sequence's partial merged back.
int64_t cascade_prefix_bytes(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c);
/// The rule: group size, prefix length and byte ratio all at or above their thresholds.
bool cascade_pays(int64_t group_size, int64_t prefix_tokens, const cascade_costs& c);

/// Sequences whose block tables start with the same `num_prefix_blocks` block ids.
struct cascade_group {
  int32_t num_prefix_blocks = 0;
  std::vector<int32_t> seqs;   ///< indices into the step's sequences, ascending
};

struct cascade_plan {
  std::vector<cascade_group> groups;   ///< in order of their first sequence
  std::vector<int32_t> group_of;       ///< per sequence of the step: its group, or -1

  bool empty() const { return groups.empty(); }
  /// Sequences that take the shared-prefix pass.
  int32_t num_grouped() const;
};

/// Finds the groups of a step. Only decodes (one new token) are grouped; prefill chunks keep the
/// per-sequence path (their query tiles already read each key once per tile, not per token). A
/// prefix is whole blocks whose keys are all in the cache before the step. The candidates form a
/// prefix tree of their block tables, built top down: split by the first block, extend each part
/// while its members agree, split where they part. A node is a set of sequences sharing its
/// depth's blocks; bottom up, each node takes the better of one group over its prefix (where
/// cascade_pays) and the best of its children, by bytes saved. O(n x shared blocks) for the tree,
/// O(nodes) for the choice; no sequence is in two groups.
cascade_plan plan_cascade(std::span<const cascade_input> seqs, int32_t block_size, const cascade_costs& costs);

}  // namespace actorserve::gpu
