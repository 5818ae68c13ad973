#pragma once
/// Hash containers of the grammar engine: a small open-addressing map from 64-bit keys to 32-bit
/// values (linear probing), for the memo and interning tables where std::unordered_map's node
/// allocations dominate, and the set of items a closure has expanded.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace actorserve::grammar::detail {

class flat_map64 {
 public:
  static constexpr uint64_t empty_key = ~uint64_t{0};

  flat_map64() { slots_.assign(16, {empty_key, 0}); }

  /// The value of `key`, or nullptr.
  const uint32_t* find(uint64_t key) const {
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == empty_key) return nullptr;
    }
  }
  /// Inserts or overwrites. `key` must not be empty_key.
  void put(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return;
      }
      if (slots_[i].key == empty_key) {
        slots_[i] = {key, value};
        ++size_;
        return;
      }
    }
  }
  size_t size() const { return size_; }
  /// Empties the map, sized for about `expected` keys (at least 16 slots, at most half full).
  void clear(size_t expected = 0) {
    size_t slots = 16;
    while (slots < 2 * expected) slots *= 2;
    slots_.assign(slots, {empty_key, 0});
    size_ = 0;
  }

 private:
  struct slot {
    uint64_t key;
    uint32_t value;
  };
  size_t slot_of(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return static_cast<size_t>(key) & (slots_.size() - 1);
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, {empty_key, 0});
    size_ = 0;
    for (const slot& s : old)
      if (s.key != empty_key) put(s.key, s.value);
  }
  std::vector<slot> slots_;
  size_t size_ = 0;
};

/// The items one closure has expanded, as frame keys (closure.hpp's frame_key(pos, below)): a
/// short list while they are few (a closure usually expands a few dozen), hashed past it so that
/// a large closure is not quadratic.
class visited_items {
 public:
  void clear() {
    list_.clear();
    if (hashed_) set_.clear();
    hashed_ = false;
  }
  /// Records `key`; false if it was already there.
  bool insert(uint64_t key) {
    if (hashed_) {
      if (set_.find(key)) return false;
      set_.put(key, 0);
      return true;
    }
    if (std::find(list_.begin(), list_.end(), key) != list_.end()) return false;
    list_.push_back(key);
    if (list_.size() > list_max) {
      for (uint64_t k : list_) set_.put(k, 0);
      hashed_ = true;
    }
    return true;
  }
  size_t size() const { return hashed_ ? set_.size() : list_.size(); }

 private:
  static constexpr size_t list_max = 32;
  std::vector<uint64_t> list_;
  flat_map64 set_;
  bool hashed_ = false;
};

}  // namespace actorserve::grammar::detail
