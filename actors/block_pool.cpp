#include "actors/block_pool.hpp"

#include <algorithm>

#include "config/check.hpp"

namespace actorserve::actors {

block_pool::block_pool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(static_cast<size_t>(num_blocks)) {
  AS_CHECK(num_blocks > 0 && block_size > 0, "block pool needs blocks");
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
  // NOTE: sized once so that a step never pays for a rehash.
  cache_.reserve(static_cast<size_t>(num_blocks));
}

kv_pool_counts block_pool::counts() const {
  kv_pool_counts c;
  c.total = static_cast<int64_t>(blocks_.size());
  c.used = c.total - num_free_;
  c.cached = num_free_cached_;
  c.free = num_free_ - num_free_cached_;
  c.shared = num_shared_;
  return c;
}

std::vector<int32_t> block_pool::table(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? std::vector<int32_t>{} : it->second.table;
}

std::vector<int32_t> block_pool::free_list() const {
  std::vector<int32_t> out;
  for (int32_t b = head_; b != -1; b = blocks_[static_cast<size_t>(b)].next) out.push_back(b);
  return out;
}

kv_answer block_pool::reserve(const kv_reservation& r) {
  kv_answer ans;
  ans.step_id = r.step_id;
  for (const auto& f : r.forks) {
    auto pit = seqs_.find(f.parent);
    seq_state child = pit == seqs_.end() ? seq_state{} : pit->second;
    for (int32_t b : child.table) incref(b);
    child.shared_tail = true;
    seqs_[f.child] = std::move(child);
  }
  for (const auto& f : r.frees) {
    auto it = seqs_.find(f.seq_id);
    if (it == seqs_.end()) continue;
    register_computed(it->second, f.num_computed);
    release(it->second);
    seqs_.erase(it);
  }
  // Hashes and computed blocks of known sequences are facts whatever the answer.
  std::vector<seq_state*> states(r.items.size(), nullptr);
  for (size_t i = 0; i < r.items.size(); ++i) {
    const auto& it = r.items[i];
    if (it.lookup) continue;
    auto& s = seqs_[it.seq_id];
    s.hashes.insert(s.hashes.end(), it.new_hashes.begin(), it.new_hashes.end());
    register_computed(s, it.num_computed);
    states[i] = &s;
  }

  // Pass 1: what each item needs from the free list; required items all or nothing.
  ++epoch_;
  std::vector<item_plan> plans(r.items.size());
  int64_t required = 0;
  for (size_t i = 0; i < r.items.size(); ++i) {
    if (r.items[i].optional) continue;
    plans[i] = plan_item(r.items[i], states[i], r.items[i].num_new);
    required += plans[i].need;
  }
  if (required > num_free_) {
    ans.granted = false;
    ans.shortfall = static_cast<int32_t>(required - num_free_);
    ans.counts = counts();
    return ans;
  }
  // Optional items in order, each after its prefix lookup: it is charged only its new tokens
  // against admit_tokens, and the first that misses (blocks or tokens) ends the grants.
  int64_t left = num_free_ - required;
  int32_t tokens_left = std::max(0, r.admit_tokens);
  bool step_busy = false;  // an earlier item computes tokens in this step
  size_t granted = 0;
  for (; granted < r.items.size(); ++granted) {
    const auto& it = r.items[granted];
    auto& p = plans[granted];
    if (!it.optional) {
      step_busy |= p.num_new > 0;
      continue;
    }
    p = plan_item(it, states[granted], tokens_left);
    if (p.num_new < p.wanted && (p.num_new == 0 || (!r.admit_chunked && step_busy))) break;
    if (p.need > left) break;
    left -= p.need;
    tokens_left -= p.num_new;
    step_busy |= p.num_new > 0;
  }

  // Pass 2: take prefix hits out of the free list first (allocation must not evict them), then
  // copy-on-write and new blocks.
  ans.granted = true;
  ans.items.resize(granted);
  for (size_t i = 0; i < granted; ++i) {
    const auto& it = r.items[i];
    if (!it.lookup) continue;
    auto& s = seqs_[it.seq_id];
    states[i] = &s;
    s.hashes = it.new_hashes;
    for (int32_t k = 0; k < plans[i].hits; ++k) {
      const int32_t b = cache_.at(s.hashes[static_cast<size_t>(k)]);
      incref(b);
      s.table.push_back(b);
    }
    s.num_registered = plans[i].hits;
    if (prefix_caching_) {
      ans.prefix_cache_queries += it.num_tokens;
      ans.prefix_cache_hits += static_cast<int64_t>(plans[i].hits) * block_size_;
    }
  }
  for (size_t i = 0; i < granted; ++i) {
    const auto& it = r.items[i];
    const auto& p = plans[i];
    auto& s = *states[i];
    auto& g = ans.items[i];
    g.table_from = it.lookup ? 0 : static_cast<int32_t>(s.table.size());
    const size_t first = static_cast<size_t>(p.computed / block_size_);
    if (s.shared_tail && p.computed % block_size_ != 0 && first < s.table.size() && ref_count(s.table[first]) > 1) {
      const int32_t fresh = allocate();
      ans.copies.emplace_back(s.table[first], fresh);
      decref(s.table[first]);
      s.table[first] = fresh;
      g.table_from = std::min(g.table_from, static_cast<int32_t>(first));
    }
    s.shared_tail = false;  // from now on this sequence writes only blocks of its own
    for (int32_t k = 0; k < p.new_blocks; ++k) s.table.push_back(allocate());
    g.seq_id = it.seq_id;
    g.num_computed = p.computed;
    g.num_new = p.num_new;
    g.num_cached = p.hits * block_size_;
    g.blocks_offset = static_cast<int32_t>(ans.blocks.size());
    g.blocks_count = static_cast<int32_t>(s.table.size()) - g.table_from;
    ans.blocks.insert(ans.blocks.end(), s.table.begin() + g.table_from, s.table.end());
  }
  ans.counts = counts();
  return ans;
}

block_pool::item_plan block_pool::plan_item(const kv_item& it, const seq_state* s, int32_t max_new) {
  item_plan p;
  int32_t have = s ? static_cast<int32_t>(s->table.size()) : 0;
  p.computed = it.num_computed;
  p.num_new = it.num_new;
  if (it.lookup && prefix_caching_) {
    const int32_t max_hits = std::min<int32_t>((it.num_tokens - 1) / block_size_,
                                               static_cast<int32_t>(it.new_hashes.size()));
    for (; p.hits < max_hits; ++p.hits) {
      auto c = cache_.find(it.new_hashes[static_cast<size_t>(p.hits)]);
      if (c == cache_.end()) break;
      auto& b = blocks_[static_cast<size_t>(c->second)];
      if (b.ref == 0 && b.mark != epoch_) {
        b.mark = epoch_;
        ++p.need;
      }
    }
    have = p.hits;
    p.computed = p.hits * block_size_;
    p.num_new = std::min(it.num_new, it.num_tokens - p.computed);
  }
  p.wanted = p.num_new;
  p.num_new = std::min(p.num_new, std::max(0, max_new));
  const int32_t blocks_needed = (p.computed + p.num_new + block_size_ - 1) / block_size_;
  p.new_blocks = std::max(0, blocks_needed - have);
  p.need += p.new_blocks;
  const size_t first = static_cast<size_t>(p.computed / block_size_);
  if (s && s->shared_tail && p.computed % block_size_ != 0 && first < s->table.size() &&
      ref_count(s->table[first]) > 1)
    ++p.need;
  return p;
}

void block_pool::register_computed(seq_state& s, int32_t num_computed) {
  if (!prefix_caching_) return;
  const int32_t full = std::min({num_computed / block_size_, static_cast<int32_t>(s.hashes.size()),
                                 static_cast<int32_t>(s.table.size())});
  for (int32_t i = s.num_registered; i < full; ++i) {
    const int32_t b = s.table[static_cast<size_t>(i)];
    auto& blk = blocks_[static_cast<size_t>(b)];
    if (blk.hashed) continue;
    const uint64_t h = s.hashes[static_cast<size_t>(i)];
    if (cache_.emplace(h, b).second) {
      blk.hashed = true;
      blk.hash = h;
    }
  }
  s.num_registered = std::max(s.num_registered, full);
}

void block_pool::release(seq_state& s) {
  // NOTE: tail blocks first, so a sequence's prefix (the part others share) is evicted last.
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) decref(*it);
  s.table.clear();
}

int32_t block_pool::allocate() {
  AS_CHECK(head_ != -1, "allocation beyond the reserved free blocks");
  const int32_t b = head_;
  unlink(b);
  auto& blk = blocks_[static_cast<size_t>(b)];
  if (blk.hashed) {
    auto c = cache_.find(blk.hash);
    if (c != cache_.end() && c->second == b) cache_.erase(c);
    blk.hashed = false;
  }
  blk.ref = 1;
  return b;
}

void block_pool::incref(int32_t b) {
  auto& blk = blocks_[static_cast<size_t>(b)];
  if (blk.ref == 0) unlink(b);
  if (++blk.ref == 2) ++num_shared_;
}

void block_pool::decref(int32_t b) {
  auto& blk = blocks_[static_cast<size_t>(b)];
  AS_CHECK(blk.ref > 0, "double free of a KV block");
  if (blk.ref-- == 2) --num_shared_;
  if (blk.ref > 0) return;
  if (blk.hashed) {
    push_back(b);
  } else {
    push_front(b);
  }
}

void block_pool::unlink(int32_t b) {
  auto& blk = blocks_[static_cast<size_t>(b)];
  if (blk.prev != -1) blocks_[static_cast<size_t>(blk.prev)].next = blk.next; else head_ = blk.next;
  if (blk.next != -1) blocks_[static_cast<size_t>(blk.next)].prev = blk.prev; else tail_ = blk.prev;
  blk.prev = blk.next = -1;
  --num_free_;
  if (blk.hashed) --num_free_cached_;
}

void block_pool::push_front(int32_t b) {
  auto& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = -1;
  blk.next = head_;
  if (head_ != -1) blocks_[static_cast<size_t>(head_)].prev = b; else tail_ = b;
  head_ = b;
  ++num_free_;
  if (blk.hashed) ++num_free_cached_;
}

void block_pool::push_back(int32_t b) {
  auto& blk = blocks_[static_cast<size_t>(b)];
  blk.next = -1;
  blk.prev = tail_;
  if (tail_ != -1) blocks_[static_cast<size_t>(tail_)].next = b; else head_ = b;
  tail_ = b;
  ++num_free_;
  if (blk.hashed) ++num_free_cached_;
}

}  // namespace actorserve::actors
