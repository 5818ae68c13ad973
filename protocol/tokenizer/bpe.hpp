#pragma once
/// The BPE model: initial symbols (bytes for byte-level vocabularies, characters with byte
/// fallback for SentencePiece-style ones), merges applied lowest rank first exactly as Hugging
/// Face's `Word::merge_all`, and a word -> ids cache.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace actorserve::protocol::detail {

/// Transparent string hash so maps keyed by std::string accept string_view lookups.
struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using string_id_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

/// What merging a pair gives: its priority (lower merges first) and the merged id.
struct merge_entry {
  int32_t rank = 0;
  int32_t new_id = 0;
};

/// Open-addressing hash map from an (id, id) pair to its merge.
class pair_map {
 public:
  /// Adds or replaces the merge of (a, b); call reserve() first.
  void insert(int32_t a, int32_t b, merge_entry m);
  void reserve(size_t n);
  /// The merge of (a, b), or nullptr.
  const merge_entry* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    uint64_t key = pack(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &vals_[i];
      if (keys_[i] == empty_key) return nullptr;
    }
  }

 private:
  static constexpr uint64_t empty_key = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<uint64_t> keys_;
  std::vector<merge_entry> vals_;
  size_t mask_ = 0;
};

/// Applies `merges` to `symbols` in place: repeatedly the lowest-rank adjacent pair, leftmost first.
void bpe_merge(std::vector<int32_t>& symbols, const pair_map& merges);
/// The same with Hugging Face's heap algorithm whatever the length (a reference for tests).
void bpe_merge_heap(std::vector<int32_t>& symbols, const pair_map& merges);

/// A per-thread, direct-mapped word -> ids cache for short words (no locks: each thread keeps
/// its own for the few tokenizers it used last).
class word_cache {
 public:
  static constexpr size_t max_word_bytes = 30;
  static constexpr size_t max_ids = 14;
  /// The calling thread's cache for the tokenizer model `owner_id`.
  static word_cache& for_thread(uint64_t owner_id);
  /// Appends the cached ids of `word` to `out`; false on a miss.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n);
  static uint64_t hash(std::string_view word);

 private:
  struct slot {
    uint64_t hash = 0;
    uint8_t key_len = 0;
    uint8_t num_ids = 0;
    char key[max_word_bytes];
    int32_t ids[max_ids];
  };
  static constexpr size_t num_slots = 1 << 14;
  std::vector<slot> slots_ = std::vector<slot>(num_slots);
};

/// The adjacent symbol pairs (bytes, or code points) that occur inside some vocabulary token.
/// A merge can only ever form across a boundary whose pair is in this set, so a long word may
/// be cut at every other boundary and its parts merged independently with identical results.
class joinable_pairs {
 public:
  /// Records every adjacent pair of units in `piece` (bytes when `bytes`, else code points).
  void add_piece(std::string_view piece, bool bytes);
  bool contains(uint32_t a, uint32_t b) const {
    if (a < 128 && b < 128) return (ascii_[a] >> b) & 1;
    return other_.count((static_cast<uint64_t>(a) << 32) | b) != 0;
  }
  /// Whether the unit (byte or code point) is on its own a vocabulary piece.
  bool is_piece(uint32_t unit) const {
    if (unit < 0x10000) return (single_bmp_[unit >> 6] >> (unit & 63)) & 1;
    return single_other_.count(unit) != 0;
  }

 private:
  std::array<__uint128_t, 128> ascii_{};
  std::unordered_set<uint64_t> other_;
  std::vector<uint64_t> single_bmp_ = std::vector<uint64_t>(0x10000 / 64);
  std::unordered_set<uint32_t> single_other_;
};

/// The BPE model of one tokenizer.json.
struct bpe_model {
  string_id_map piece_to_id;  ///< model-space piece (raw bytes when byte_level) -> id
  std::array<int32_t, 256> byte_id{};      ///< single-byte piece -> id, -1 if none
  std::array<int32_t, 256> fallback_id{};  ///< `<0xNN>` token -> id, -1 if none
  pair_map merges;
  bool byte_level = false;  ///< symbols are raw bytes (ByteLevel pre-tokenizer)
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
  joinable_pairs joinable;
  uint64_t cache_owner_id = 0;  ///< unique per loaded model; keys the per-thread caches

  /// Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  /// encode_word without cache, cuts or linear merging: Hugging Face's algorithm as written.
  void encode_word_reference(std::string_view word, std::vector<int32_t>& out) const;

 private:
  /// Merges one (sub)word through the cache; no ignore_merges shortcut.
  void merge_cached(std::string_view word, word_cache& cache, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
};

}  // namespace actorserve::protocol::detail
