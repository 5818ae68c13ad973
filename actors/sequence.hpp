#pragma once
/// One sequence's state as the scheduler sees it (no CAF). One progress model for everything:
/// `num_computed` catches up with `tokens.size()`; prefill, chunked prefill, prefix hits, decode
/// and recompute after preemption are all that one mechanism.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/sampling_params.hpp"
#include "gpu/sampling/token_mask.hpp"
#include "grammar/matcher.hpp"

namespace actorserve::actors {

/// Lifecycle in chronological order.
enum class seq_status { waiting, running, finished };

/// Why a sequence stopped (scheduler-level reasons; stop strings are the request's business).
/// stop: EOS or a stop id (the token is not part of the output); complete: the grammar of a
/// constrained sequence is complete and allows nothing more (the last token is output);
/// grammar_overflow: the constraint's readings multiplied past what the matcher follows
/// (grammar::matcher::overflowed), an error of the request's constraint, not of the engine.
enum class seq_finish { none, stop, length, aborted, error, complete, grammar_overflow };

/// A sequence's milestones on the scheduler's clock (microseconds), as vLLM stamps a request:
/// queued (added), first scheduled (the first step granted to it; a readmission after preemption
/// or an executor restart does not move it), first and last token appended. -1: not reached.
/// Choices forked from a parent inherit its stamps.
struct seq_times {
  int64_t queued_us = -1, scheduled_us = -1, first_token_us = -1, last_token_us = -1;
};

struct sequence {
  uint64_t seq_id = 0;
  uint64_t group_id = 0;          ///< the request
  int32_t index = 0;              ///< choice index within the request (< n)
  int32_t priority = 0;           ///< lower is served first
  uint64_t arrival = 0;           ///< admission order (FCFS tie-break)
  std::shared_ptr<const sampling_params> params;
  uint64_t seed = 0;

  std::vector<int32_t> tokens;    ///< prompt + generated
  int32_t num_prompt = 0;
  int32_t num_computed = 0;       ///< tokens whose K/V are in this sequence's blocks
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  ///< full-block hashes of `tokens` (prefix caching)
  int32_t num_hashes_sent = 0;    ///< hashes the block pool already has
  bool holds_blocks = false;      ///< the pool knows this sequence

  int32_t fork_n = 1;             ///< > 1: compute the prompt but its last token, then fork n ways
  std::optional<uint64_t> fork_parent;  ///< set until the pool has copied the parent's table

  seq_status status = seq_status::waiting;
  seq_finish finish = seq_finish::none;

  /// Work of steps still in flight (async scheduling): tokens being computed and tokens being
  /// sampled. Planning ahead treats them as done; the step's result makes them real.
  int32_t num_inflight = 0;
  int32_t num_inflight_samples = 0;

  /// Grammar-constrained decoding: where the output is in its grammar (null: unconstrained). It
  /// has read every token in `tokens`, none still being sampled.
  std::shared_ptr<grammar::matcher> matcher;
  /// The mask of a sampling planned ahead (async scheduling), filled once the token sampled
  /// before it is appended; `pending_mask_index` is that sampling's num_generated.
  std::shared_ptr<gpu::token_mask> pending_mask;
  int32_t pending_mask_index = 0;

  int32_t num_preemptions = 0;
  int64_t num_recomputed = 0;     ///< tokens computed a second time after preemption
  int32_t recompute_until = 0;    ///< tokens computed before the last preemption
  int32_t num_cached = 0;         ///< prompt tokens served by the prefix cache at first admission
  bool admitted_once = false;
  seq_times times;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_generated() const { return num_tokens() - num_prompt; }
  /// The token count this sequence computes up to before it samples (fork parents stop short).
  int32_t target() const { return fork_n > 1 ? num_tokens() - 1 : num_tokens(); }
  /// Tokens still to compute.
  int32_t num_uncomputed() const { return target() - num_computed; }
  /// The same counts once the steps in flight have completed (planning ahead).
  int32_t eff_computed() const { return num_computed + num_inflight; }
  int32_t eff_tokens() const { return num_tokens() + num_inflight_samples; }
  int32_t eff_generated() const { return num_generated() + num_inflight_samples; }
  int32_t eff_target() const { return fork_n > 1 ? eff_tokens() - 1 : eff_tokens(); }
  int32_t eff_uncomputed() const { return eff_target() - eff_computed(); }
};

/// The seed of choice `index` of a request with n > 1 (each child of the fork samples its own).
inline uint64_t child_seed(uint64_t seed, int32_t index) {
  return seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index);
}

/// Appends a sampled token and decides whether the sequence is done: EOS/stop ids (unless
/// ignore_eos, after min_tokens), max_tokens, or the model's maximum length.
seq_finish append_token(sequence& s, int32_t token, const std::vector<int32_t>& eos_ids, int32_t max_model_len,
                        int32_t block_size, bool hash_blocks);

}  // namespace actorserve::actors
