#include "protocol/tokenizer/bpe.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol::detail {
namespace {

constexpr int32_t no_rank = INT32_MAX;
/// Words longer than this (bytes) are cut at boundaries no merge can cross before merging.
constexpr size_t split_threshold = 64;

/// The code point of one well-formed multi-byte UTF-8 character.
uint32_t decode_code_point(std::string_view ch) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(ch[i])); };
  if (ch.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (ch.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

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

}  // namespace

void bpe_merge_heap(std::vector<int32_t>& sym, const pair_map& merges) {
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
    bpe_merge_heap(symbols, merges);
}

word_cache& word_cache::for_thread(uint64_t owner_id) {
  constexpr size_t max_caches = 4;
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<word_cache>>> caches;
  for (auto& [id, cache] : caches)
    if (id == owner_id) return *cache;
  if (caches.size() == max_caches) caches.erase(caches.begin());  // the least recently created
  caches.emplace_back(owner_id, std::make_unique<word_cache>());
  return *caches.back().second;
}

uint64_t word_cache::hash(std::string_view w) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ w.size();
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, w.data() + i, 8);
    h = (h ^ v) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, w.data() + i, w.size() - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 32);
}

bool word_cache::lookup(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
  const slot& s = slots_[h & (num_slots - 1)];
  if (s.hash != h || s.key_len != word.size() || std::memcmp(s.key, word.data(), word.size()) != 0) return false;
  out.insert(out.end(), s.ids, s.ids + s.num_ids);
  return true;
}

void word_cache::insert(std::string_view word, uint64_t h, const int32_t* ids, size_t n) {
  if (word.size() > max_word_bytes || n > max_ids) return;
  slot& s = slots_[h & (num_slots - 1)];
  s.hash = h;
  s.key_len = static_cast<uint8_t>(word.size());
  s.num_ids = static_cast<uint8_t>(n);
  std::memcpy(s.key, word.data(), word.size());
  if (n > 0) std::memcpy(s.ids, ids, n * sizeof(int32_t));  // ids may be null when n == 0
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

void joinable_pairs::add_piece(std::string_view piece, bool bytes) {
  uint32_t prev = UINT32_MAX;
  for (size_t i = 0; i < piece.size();) {
    size_t len = bytes ? 1 : utf8_char_len(piece, i);
    if (len == 0) len = 1;
    uint32_t cur = bytes || len == 1 ? static_cast<uint8_t>(piece[i]) : decode_code_point(piece.substr(i, len));
    if (prev != UINT32_MAX) {
      if (prev < 128 && cur < 128)
        ascii_[prev] |= __uint128_t{1} << cur;
      else
        other_.insert((static_cast<uint64_t>(prev) << 32) | cur);
    }
    prev = cur;
    i += len;
    if (i == piece.size() && i == len) {  // the piece is a single unit
      if (cur < 0x10000)
        single_bmp_[cur >> 6] |= uint64_t{1} << (cur & 63);
      else
        single_other_.insert(cur);
    }
  }
}

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = piece_to_id.find(word); it != piece_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  word_cache& cache = word_cache::for_thread(cache_owner_id);
  if (word.size() <= split_threshold) return merge_cached(word, cache, out);
  // Long words (no pre-tokenizer, long whitespace runs): cut where no merge can ever form.
  size_t start = 0;
  uint32_t prev = UINT32_MAX;
  bool prev_known = false;
  for (size_t i = 0; i < word.size();) {
    size_t len = byte_level || static_cast<uint8_t>(word[i]) < 0x80 ? 1 : utf8_char_len(word, i);
    // Only cut between two symbols of the vocabulary: byte-fallback and <unk> symbols never are.
    bool known = len != 0;
    if (len == 0) len = 1;
    uint32_t cur = byte_level || len == 1 ? static_cast<uint8_t>(word[i]) : decode_code_point(word.substr(i, len));
    known = known && joinable.is_piece(cur);
    if (i > start && prev_known && known && !joinable.contains(prev, cur)) {
      merge_cached(word.substr(start, i - start), cache, out);
      start = i;
    }
    prev = cur;
    prev_known = known;
    i += len;
  }
  merge_cached(word.substr(start), cache, out);
}

void bpe_model::merge_cached(std::string_view word, word_cache& cache, std::vector<int32_t>& out) const {
  bool cacheable = word.size() <= word_cache::max_word_bytes;
  uint64_t h = cacheable ? word_cache::hash(word) : 0;
  if (cacheable && cache.lookup(word, h, out)) return;
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  bpe_merge(symbols, merges);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache.insert(word, h, symbols.data(), symbols.size());
}

void bpe_model::encode_word_reference(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges)
    if (auto it = piece_to_id.find(word); it != piece_to_id.end()) return out.push_back(it->second);
  std::vector<int32_t> symbols;
  initial_symbols(word, symbols);
  bpe_merge_heap(symbols, merges);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace actorserve::protocol::detail
