#include "actors/block_hash.hpp"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace actorserve::actors {

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &parent, sizeof parent);
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  return XXH3_64bits_digest(&state);
}

void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens, int32_t block_size) {
  const size_t bs = static_cast<size_t>(block_size);
  while ((hashes.size() + 1) * bs <= tokens.size()) {
    const uint64_t parent = hashes.empty() ? root_block_hash : hashes.back();
    hashes.push_back(hash_block(parent, tokens.subspan(hashes.size() * bs, bs)));
  }
}

}  // namespace actorserve::actors
