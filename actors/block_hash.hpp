#pragma once
/// Prefix-cache keys: each full block of tokens is keyed by XXH3_64bits over (parent hash,
/// token ids), so a key names the whole prefix up to and including its block.
#include <cstdint>
#include <span>
#include <vector>

namespace actorserve::actors {

/// The parent hash of a sequence's first block.
inline constexpr uint64_t root_block_hash = 0x61637473'65727665ull;  // "actserve"

/// Hash of one full block given its parent's hash.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

/// Appends the hashes of the full blocks of `tokens` not yet in `hashes` (hashes.size() blocks are
/// already hashed).
void extend_block_hashes(std::vector<uint64_t>& hashes, std::span<const int32_t> tokens, int32_t block_size);

}  // namespace actorserve::actors
