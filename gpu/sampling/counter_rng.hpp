#pragma once
/// Counter-based randomness for sampling: one uniform draw is a pure function of
/// (seed, counter), so a sequence replayed after preemption draws exactly the same numbers.
/// Header-only and dependency-free so a device sampler can reproduce the same stream.
#include <cstdint>

namespace actorserve::gpu {

/// splitmix64's finaliser: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// 64 random bits for draw number `counter` of the stream keyed by `seed`.
constexpr uint64_t counter_bits(uint64_t seed, uint64_t counter) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ (counter * 0xd1b54a32d192ed03ULL + 1));
}

/// A uniform double in [0, 1) for draw number `counter` of the stream keyed by `seed`.
constexpr double counter_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(counter_bits(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace actorserve::gpu
