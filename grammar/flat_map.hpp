#pragma once
/// A small open-addressing hash map from 64-bit keys to 32-bit values (linear probing), for the
/// mask compiler's memo tables where std::unordered_map's node allocations dominate.
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

}  // namespace actorserve::grammar::detail
