#pragma once
/// The small value types exchanged between the scheduler and the KV block manager: one
/// reservation per step, answered by one grant (or a shortfall). The scheduler never touches pool
/// internals; the block pool never sees sequences, only these values.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace actorserve::actors {

/// One sequence's claim in a step.
struct kv_item {
  uint64_t seq_id = 0;
  int32_t num_computed = 0;   ///< tokens already in the cache (the pool trusts this count)
  int32_t num_tokens = 0;     ///< tokens the sequence has now (prompt + generated)
  /// Tokens to compute this step, at most (counted after prefix hits). An optional item asks
  /// for its whole uncomputed prompt: the pool cuts it to kv_reservation::admit_tokens.
  int32_t num_new = 0;
  bool lookup = false;        ///< the sequence holds no blocks yet: try the prefix cache first
  bool optional = false;      ///< admission from waiting: may be left out (FCFS cut-off)
  /// Full-block hashes of the sequence not yet reported to the pool, in block order.
  std::vector<uint64_t> new_hashes;
};

/// A sequence whose blocks go back to the pool, with how many of its tokens were computed (its
/// full computed blocks enter the prefix cache).
struct kv_free {
  uint64_t seq_id = 0;
  int32_t num_computed = 0;
};

/// Child `child` starts sharing every block of `parent` (n > 1 samples; copy-on-write later).
struct kv_fork {
  uint64_t parent = 0;
  uint64_t child = 0;
};

/// Everything one step asks of the pool. `forks` then `frees` apply unconditionally, then the
/// items: required items all or nothing, optional items in order until the first that misses.
/// An optional item misses when its blocks do not fit or when the token budget it is charged
/// against does not: after its prefix lookup it costs only its new tokens, so cached prompts
/// leave the budget to the items behind them.
struct kv_reservation {
  uint64_t step_id = 0;
  std::vector<kv_fork> forks;
  std::vector<kv_free> frees;
  std::vector<kv_item> items;
  /// New tokens the optional items may compute together (the step's budget left after the
  /// required items).
  int32_t admit_tokens = std::numeric_limits<int32_t>::max();
  /// An optional item larger than what is left of admit_tokens is cut to it (chunked prefill);
  /// otherwise it misses, unless no earlier item computes anything in the step (then it is cut).
  bool admit_chunked = true;
};

/// A granted item: where the sequence's computation starts (after prefix hits) and how its
/// block table changed: entries from `table_from` on are replaced by
/// kv_answer::blocks[blocks_offset, blocks_offset + blocks_count) (new blocks, copy-on-write).
struct kv_grant_item {
  uint64_t seq_id = 0;
  int32_t num_computed = 0;   ///< after prefix-cache hits (>= the item's num_computed)
  int32_t num_new = 0;        ///< tokens to compute now (<= the item's num_new; optional: <= admit_tokens left)
  int32_t num_cached = 0;     ///< tokens found in the prefix cache (lookup items)
  int32_t table_from = 0;
  int32_t blocks_offset = 0, blocks_count = 0;
};

/// Pool occupancy after the answer (for stats).
struct kv_pool_counts {
  int64_t total = 0, used = 0, free = 0, cached = 0;
  int64_t shared = 0;  ///< blocks referenced by more than one sequence
};

/// Applies a grant's table changes to a block table.
inline void apply_grant(std::vector<int32_t>& table, const kv_grant_item& g, const std::vector<int32_t>& blocks) {
  table.resize(static_cast<size_t>(g.table_from));
  table.insert(table.end(), blocks.begin() + g.blocks_offset, blocks.begin() + g.blocks_offset + g.blocks_count);
}

/// The pool's answer: granted (items[i] answers the reservation's items[i] for i < items.size();
/// optional items past that were left out) or a shortfall (nothing was granted).
struct kv_answer {
  uint64_t step_id = 0;
  bool granted = false;
  int32_t shortfall = 0;      ///< blocks missing for the required items
  std::vector<kv_grant_item> items;
  std::vector<int32_t> blocks;                       ///< table changes of all items, flat
  std::vector<std::pair<int32_t, int32_t>> copies;  ///< copy-on-write (src, dst), before the step
  kv_pool_counts counts;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  ///< tokens, this answer only
};

}  // namespace actorserve::actors
