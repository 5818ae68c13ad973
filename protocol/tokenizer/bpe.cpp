#include "protocol/tokenizer/bpe.hpp"

#include <algorithm>
#include <climits>

#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol::detail {
namespace {

constexpr int32_t no_rank = INT32_MAX;

/// Words up to this many symbols merge with a linear scan over cached pair ranks; longer ones
/// use a heap. Both pick the lowest rank, leftmost first, so results are identical.
constexpr size_t linear_merge_limit = 48;

void merge_linear(std::vector<int32_t>& sym, const pair_map& merges) {
  size_t n = sym.size();
  int32_t ranks[linear_merge_limit];
  int32_t new_ids[linear_merge_limit];
  auto fill = [&](size_t i) {
    const merge_entry* m = merges.find(sym[i], sym[i + 1]);
    ranks[i] = m ? m->rank : no_rank;
    new_ids[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == no_rank) break;
    sym[best] = new_ids[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      ranks[i] = ranks[i + 1];
      new_ids[i] = new_ids[i + 1];
    }
    --n;
    if (best + 1 < n) fill(best);
    if (best > 0) fill(best - 1);
  }
  sym.resize(n);
}

struct heap_entry {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std heap is a max-heap: "less" means lower priority (higher rank, then later position).
  bool operator<(const heap_entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

void merge_heap(std::vector<int32_t>& sym, const pair_map& merges) {
  const auto n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  std::vector<heap_entry> heap;
  heap.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n)
      if (const merge_entry* m = merges.find(sym[i], sym[i + 1])) heap.push_back({m->rank, i, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    heap_entry top = heap.back();
    heap.pop_back();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    int32_t right = next[top.pos];
    const merge_entry* cur = merges.find(sym[top.pos], sym[right]);
    if (!cur || cur->new_id != top.new_id) continue;  // stale entry
    sym[top.pos] = top.new_id;
    alive[right] = 0;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (int32_t p = prev[top.pos]; p >= 0) {
      if (const merge_entry* m = merges.find(sym[p], sym[top.pos])) {
        heap.push_back({m->rank, p, m->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (int32_t nx = next[top.pos]; nx >= 0) {
      if (const merge_entry* m = merges.find(sym[top.pos], sym[nx])) {
        heap.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  size_t out = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i]) sym[out++] = sym[i];
  sym.resize(out);
}

}  // namespace

void pair_map::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, empty_key);
  vals_.assign(cap, merge_entry{});
  mask_ = cap - 1;
}

void pair_map::insert(int32_t a, int32_t b, merge_entry m) {
  uint64_t key = pack(a, b);
  for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key || keys_[i] == empty_key) {
      keys_[i] = key;
      vals_[i] = m;
      return;
    }
  }
}

void bpe_merge(std::vector<int32_t>& symbols, const pair_map& merges) {
  if (symbols.size() < 2) return;
  if (symbols.size() <= linear_merge_limit)
    merge_linear(symbols, merges);
  else
    merge_heap(symbols, merges);
}

bool word_cache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  shard& s = shards_[string_hash{}(word) % num_shards];
  std::lock_guard lock(s.mu);
  auto it = s.map.find(word);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void word_cache::insert(std::string_view word, const int32_t* ids, size_t n) const {
  shard& s = shards_[string_hash{}(word) % num_shards];
  std::lock_guard lock(s.mu);
  if (s.map.size() >= max_entries_per_shard) s.map.clear();  // NOTE: crude bound; refills quickly
  s.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
}

void bpe_model::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  if (byte_level) {
    for (char c : word)
      if (int32_t id = byte_id[static_cast<uint8_t>(c)]; id >= 0) symbols.push_back(id);
      else if (unk_id >= 0 && !(fuse_unk && !symbols.empty() && symbols.back() == unk_id))
        symbols.push_back(unk_id);
    return;
  }
  // Characters, as Hugging Face's BPE::merge_word: vocabulary, else byte fallback, else <unk>.
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t len = utf8_char_len(word, i);
    if (len == 0) len = 1;  // an invalid byte is its own (never known) character
    std::string_view ch = word.substr(i, len);
    i += len;
    int32_t id = len == 1 ? byte_id[static_cast<uint8_t>(ch[0])] : -1;
    if (id < 0 && len > 1) {
      auto it = piece_to_id.find(ch);
      if (it != piece_to_id.end()) id = it->second;
    }
    if (id >= 0) {
      if (pending_unk) symbols.push_back(unk_id);
      pending_unk = false;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback) {
      bool all = std::all_of(ch.begin(), ch.end(), [&](char c) { return fallback_id[static_cast<uint8_t>(c)] >= 0; });
      if (all) {
        if (pending_unk) symbols.push_back(unk_id);
        pending_unk = false;
        for (char c : ch) symbols.push_back(fallback_id[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk && !fuse_unk) symbols.push_back(unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(unk_id);
}

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  bool cacheable = word.size() <= word_cache::max_word_bytes;
  if (cacheable && cache->lookup(word, out)) return;
  if (ignore_merges) {
    if (auto it = piece_to_id.find(word); it != piece_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  bpe_merge(symbols, merges);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache->insert(word, symbols.data(), symbols.size());
}

}  // namespace actorserve::protocol::detail
