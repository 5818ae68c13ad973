#pragma once
/// Host-only choices of how decode attention is cut into CTAs (no CUDA calls: unit-tested
/// without a GPU). docs/attention.md explains the reasoning behind each rule.
#include <cstdint>
#include <span>

namespace actorserve::gpu::cuda {

/// What the flash-decoding split heuristic looks at besides the KV lengths.
struct split_inputs {
  int num_kv_heads = 1;
  int num_sms = 1;
  int ctas_per_sm = 1;       ///< resident decode CTAs per SM (occupancy)
  int tile = 64;             ///< KV tokens per pipeline stage; chunks are multiples of it
  int min_chunk = 128;       ///< no split at or below this length; the floor of longer chunks...
  int short_pieces = 8;      ///< ...unless longest / short_pieces (rounded up to a tile) is lower
  int max_partials = 0;      ///< partial slots available (pieces of split sequences)
  /// Long pieces at one CTA per SM: when > 0 and ctas_per_sm > 1, the split sized for one CTA
  /// per SM is taken if its chunk is at least this many tokens (flash-decoding: 2048). Half the
  /// pieces halve the merge; a CTA streaming that long keeps enough bytes in flight alone.
  int long_piece_tokens = 0;
};

/// KV tokens per split-K piece for one decode step of sequences with `kv_lens` keys each, or 0
/// for no split. With B x KVH CTAs already filling the resident slots (num_sms x ctas_per_sm),
/// or the longest sequence at most `min_chunk` long, no split; otherwise the smallest chunk (a
/// multiple of `tile`, at least min(min_chunk, longest / short_pieces)) whose pieces,
/// sum_i ceil(len_i / chunk) x KVH, still fit in one wave of resident slots and whose partials
/// fit `max_partials`. With `long_piece_tokens` set, the same rule at one CTA per SM first.
int32_t choose_kv_chunk(std::span<const int32_t> kv_lens, const split_inputs& in);

/// CTAs a decode step runs with the given chunk (0: one per sequence and KV head).
int64_t decode_ctas(std::span<const int32_t> kv_lens, int num_kv_heads, int32_t chunk);

}  // namespace actorserve::gpu::cuda
