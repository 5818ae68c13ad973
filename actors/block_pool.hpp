#pragma once
/// The KV block pool policy (no CAF): fixed-size blocks with reference counts, a free list in
/// eviction order, automatic prefix caching keyed by chained block hashes, and copy-on-write for
/// blocks shared by forked sequences. It answers a whole step's reservation at once.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "actors/kv_types.hpp"

namespace actorserve::actors {

class block_pool {
 public:
  /// A pool of `num_blocks` blocks of `block_size` tokens.
  block_pool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  /// Applies forks and frees, then grants the items (see kv_reservation) or reports a shortfall.
  kv_answer reserve(const kv_reservation& r);

  /// Occupancy now.
  kv_pool_counts counts() const;
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  /// Reference count of one block.
  int32_t ref_count(int32_t block) const { return blocks_[static_cast<size_t>(block)].ref; }
  /// Whether a block holds a prefix-cache key.
  bool is_cached(int32_t block) const { return blocks_[static_cast<size_t>(block)].hashed; }
  /// The block table of a sequence (empty if the pool does not know it).
  std::vector<int32_t> table(uint64_t seq_id) const;
  /// Sequences holding blocks.
  size_t num_sequences() const { return seqs_.size(); }
  /// The free list, next victim first.
  std::vector<int32_t> free_list() const;

 private:
  struct block {
    int32_t ref = 0;
    bool hashed = false;
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  ///< free-list links (valid while ref == 0)
    uint32_t mark = 0;             ///< reservation epoch that already counted this block
  };
  struct seq_state {
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;  ///< full-block hashes reported by the scheduler
    int32_t num_registered = 0;    ///< leading blocks whose keys are in the cache
    bool shared_tail = false;      ///< forked: the partial last block may be shared (copy-on-write)
  };
  struct item_plan {
    int32_t hits = 0, computed = 0, num_new = 0, new_blocks = 0, need = 0;
    int32_t wanted = 0;  ///< num_new before the token cap
  };

  /// What `it` needs: its prefix hits, then at most `max_new` new tokens and their blocks.
  item_plan plan_item(const kv_item& it, const seq_state* s, int32_t max_new);
  void register_computed(seq_state& s, int32_t num_computed);
  void release(seq_state& s);
  int32_t allocate();
  void incref(int32_t b);
  void decref(int32_t b);
  void unlink(int32_t b);
  void push_front(int32_t b);
  void push_back(int32_t b);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;          ///< ref == 0 (cached or not)
  int64_t num_free_cached_ = 0;   ///< ref == 0 and hashed
  int64_t num_shared_ = 0;        ///< ref > 1
  uint32_t epoch_ = 0;
  std::unordered_map<uint64_t, int32_t> cache_;  ///< block hash -> block
  std::unordered_map<uint64_t, seq_state> seqs_;
};

}  // namespace actorserve::actors
