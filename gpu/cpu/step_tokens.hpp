#pragma once
/// How the CPU model lays out one step: each sequence's share, and the step's tokens flat over
/// the sequences in batch order (what the attention implementations read).
#include <cstdint>
#include <span>

namespace actorserve::gpu::cpu {

/// One sequence's share of a forward pass (already validated).
struct forward_seq {
  int64_t num_computed = 0;               ///< tokens already in the cache
  std::span<const int32_t> tokens;        ///< new tokens at positions num_computed...
  std::span<const int32_t> block_table;   ///< covers [0, num_computed + tokens.size())
  bool want_logits = false;               ///< produce logits at the last new token
};

/// The step's tokens, flat: token t of the step belongs to sequence seq_of[t] at position pos[t].
struct step_tokens {
  std::span<const forward_seq> seqs;
  std::span<const int32_t> seq_of;        ///< [T] sequence index
  std::span<const int64_t> pos;           ///< [T] position
  std::span<const int64_t> seq_start;     ///< [num_seqs] first flat token
  const float* cos = nullptr;             ///< [T][rope_dim/2], the rope's attention factor included
  const float* sin = nullptr;             ///< [T][rope_dim/2]

  size_t num_tokens() const { return pos.size(); }
};

}  // namespace actorserve::gpu::cpu
