#pragma once
/// The BPE model: initial symbols (bytes for byte-level vocabularies, characters with byte
/// fallback for SentencePiece-style ones), merges applied lowest rank first exactly as Hugging
/// Face's `Word::merge_all`, and a word -> ids cache.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
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

/// A bounded, sharded, thread-safe word -> ids cache.
class word_cache {
 public:
  static constexpr size_t max_word_bytes = 256;
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  static constexpr size_t num_shards = 16;
  static constexpr size_t max_entries_per_shard = 8192;
  struct shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, string_hash, std::equal_to<>> map;
  };
  mutable std::array<shard, num_shards> shards_;
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
  std::unique_ptr<word_cache> cache = std::make_unique<word_cache>();

  /// Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
};

}  // namespace actorserve::protocol::detail
