#pragma once
/// A set of bytes (256 bits): what one element of a grammar accepts.
#include <array>
#include <bit>
#include <cstdint>
#include <string>

namespace actorserve::grammar {

struct byte_set {
  std::array<uint64_t, 4> bits{};

  static byte_set of(uint8_t b) {
    byte_set s;
    s.set(b);
    return s;
  }
  /// Bytes lo..hi inclusive.
  static byte_set range(uint8_t lo, uint8_t hi) {
    byte_set s;
    s.set_range(lo, hi);
    return s;
  }
  static byte_set all() {
    byte_set s;
    s.bits.fill(~uint64_t{0});
    return s;
  }

  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void reset(uint8_t b) { bits[b >> 6] &= ~(uint64_t{1} << (b & 63)); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  int count() const {
    return std::popcount(bits[0]) + std::popcount(bits[1]) + std::popcount(bits[2]) + std::popcount(bits[3]);
  }
  byte_set operator|(const byte_set& o) const {
    byte_set r;
    for (size_t i = 0; i < 4; ++i) r.bits[i] = bits[i] | o.bits[i];
    return r;
  }
  byte_set operator&(const byte_set& o) const {
    byte_set r;
    for (size_t i = 0; i < 4; ++i) r.bits[i] = bits[i] & o.bits[i];
    return r;
  }
  byte_set operator~() const {
    byte_set r;
    for (size_t i = 0; i < 4; ++i) r.bits[i] = ~bits[i];
    return r;
  }
  byte_set& operator|=(const byte_set& o) { return *this = *this | o; }
  bool operator==(const byte_set&) const = default;
};

/// The set as a bracket expression ("[a-z_]", or "'x'" for one printable byte), for grammar text.
std::string to_string(const byte_set& s);

}  // namespace actorserve::grammar
