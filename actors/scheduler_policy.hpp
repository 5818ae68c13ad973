#pragma once
/// The scheduling policy (no CAF): waiting and running queues, a per-step token budget and
/// sequence cap, chunked prefill, FCFS with optional priorities, preemption by recompute and n>1
/// forks. It talks to the block pool only through kv_reservation / kv_answer values and to the
/// executor only through gpu::step_batch / gpu::step_result.
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/engine.hpp"
#include "actors/kv_types.hpp"
#include "actors/sequence.hpp"
#include "gpu/executor.hpp"

namespace actorserve::actors {

struct scheduler_config {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  bool enable_chunked_prefill = true;
  bool async_scheduling = true;      ///< the actor plans ahead (plan_ahead) while a step runs
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  int32_t max_model_len = 0;         ///< 0: unlimited
  std::vector<int32_t> eos_token_ids;
};

/// A request entering the scheduler (n sequences once its prompt is computed).
struct new_request {
  uint64_t group_id = 0;
  std::vector<int32_t> prompt;
  std::shared_ptr<const sampling_params> params;
  uint64_t seed = 0;
  int32_t priority = 0;
  /// Grammar-constrained decoding: the grammar the output follows (null: none).
  std::shared_ptr<const grammar::compiled_grammar> grammar;
  /// A choice resumed on another engine (n == 1): the last `num_generated` tokens of `prompt`
  /// were generated already and count as such (max_tokens, penalties, the sampler's counter);
  /// `index` is its choice index.
  int32_t num_generated = 0;
  int32_t index = 0;
};

/// What one step produced for one sequence: a token and/or the end of the sequence.
struct seq_output {
  uint64_t group_id = 0;
  int32_t index = 0;
  bool has_token = false;
  gpu::sampled_token token;
  seq_finish finish = seq_finish::none;
  int32_t num_cached = 0;            ///< prompt tokens served by the prefix cache
  int32_t num_preemptions = 0;
  int64_t num_recomputed = 0;
  /// The sequence's milestones in microseconds since it was queued on this engine (its own
  /// clock, so they stay meaningful across processes); -1: not reached (seq_times).
  int64_t scheduled_us = -1, first_token_us = -1, last_token_us = -1;
};

/// A request's milestones over its choices, gathered from their seq_outputs (the earliest
/// scheduling and first token, the latest token), and the request_times they give.
struct request_clock {
  int64_t scheduled_us = -1, first_token_us = -1, last_token_us = -1;
  void add(const seq_output& o);
  request_times times() const;
};

/// Totals since start. NOTE: each keeps its name through stats_board and engine_stats to its
/// Prometheus series (`actorserve:<name>_total`).
struct scheduler_counters {
  int64_t num_preemptions = 0, num_recomputed_tokens = 0, num_computed_tokens = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0, num_steps = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;   ///< in tokens
  /// Granted steps by tokens computed, per bucket of iteration_tokens_bounds (engine_stats).
  std::array<int64_t, num_iteration_tokens_buckets> iteration_tokens{};
};

/// The microseconds of a monotonic clock; the scheduler stamps sequences with it (seq_times).
using scheduler_clock = std::function<int64_t()>;
/// std::chrono::steady_clock in microseconds.
int64_t steady_clock_us();

class scheduler_policy {
 public:
  explicit scheduler_policy(scheduler_config cfg, scheduler_clock clock = steady_clock_us);
  ~scheduler_policy();

  /// Queues a request (sorted by priority, then arrival).
  void add(new_request r);
  /// Drops every sequence of a request (or only choice `index` when >= 0); its blocks are freed
  /// by the next reservation.
  void abort(uint64_t group_id, int32_t index = -1);

  /// The next reservation for the pool, or nothing when there is nothing to compute or free.
  /// Only with no step in flight (use plan_ahead otherwise).
  std::optional<kv_reservation> plan();
  /// Async scheduling: the next reservation while exactly one step is in flight. Its work counts
  /// as done: a sequence sampling in it decodes a gpu::previous_token placeholder next (its KV
  /// slot reserved now), unless it needs the token on the host (penalties: the history) or the
  /// pending token ends it by length; prefill continues after the chunk in flight. A shortfall
  /// is not resolved by preemption: the plan is dropped (on_answer decides nothing) and the
  /// caller plans again once the step in flight has completed.
  std::optional<kv_reservation> plan_ahead();

  struct decision {
    std::optional<gpu::step_batch> step;       ///< granted: run this
    std::optional<kv_reservation> retry;       ///< shortfall: victims preempted, ask again
    std::vector<seq_output> failed;            ///< sequences that can never fit the pool
  };
  /// Applies the pool's answer to the last reservation.
  decision on_answer(const kv_answer& a);
  /// Applies a finished step (the oldest in flight): advances progress, appends tokens,
  /// finishes and forks sequences. Outputs of sequences that ended meanwhile (finished by the
  /// step before, aborted) are dropped.
  std::vector<seq_output> on_step_done(const gpu::step_result& r);
  /// After an executor failure (the in-flight step is lost, the device's KV contents are gone
  /// and the pool is reset): every sequence drops its blocks and running ones go back to the
  /// head of waiting with prompt + generated tokens, to be recomputed as after preemption.
  void requeue_all_for_recompute();

  bool has_work() const { return !running_.empty() || !waiting_.empty() || !pending_frees_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  /// Steps granted and not yet completed.
  size_t num_steps_in_flight() const { return in_flight_.size(); }
  const scheduler_counters& counters() const { return counters_; }
  /// A live sequence, or null.
  const sequence* find(uint64_t seq_id) const;
  /// Live sequence ids of a request.
  std::vector<uint64_t> group(uint64_t group_id) const;

 private:
  struct planned {
    sequence* seq;
    bool from_waiting;
  };
  struct in_flight {
    uint64_t seq_id;
    int32_t num_new;
    bool sample;
  };
  struct step_record {
    uint64_t step_id;
    std::vector<in_flight> seqs;
  };

  /// The most waiting sequences one reservation lists as admission candidates: each carries its
  /// block hashes, so a long queue of cache-heavy prompts costs a bounded copy per step.
  static constexpr size_t max_admission_candidates = 512;

  std::optional<kv_reservation> plan_impl(bool admit);
  /// The fewest new tokens the pool can grant waiting sequence `s` (all its cacheable blocks hit).
  int32_t least_new_tokens(const sequence& s) const;
  bool may_plan_ahead(const sequence& s) const;
  kv_item make_item(sequence& s, int32_t num_new, bool from_waiting);
  void preempt(sequence& s);
  void finish(sequence& s, seq_finish why);
  void fork(sequence& parent);
  void insert_waiting(sequence* s);
  void abort_now(uint64_t group_id, int32_t index);
  /// Applies the aborts that arrived while a reservation was outstanding.
  void flush_deferred_aborts();
  /// Ends `s` with an error and returns the output that tells its request.
  seq_output fail(sequence& s);
  static void fill_step_sequence(gpu::step_sequence& q, sequence& s, const kv_grant_item& g);
  /// Writes the tokens `s` may sample next (its matcher is current) into `mask`; `index` is
  /// that sampling's num_generated (min_tokens).
  static void fill_mask(const sequence& s, gpu::token_mask& mask, int32_t index);
  /// Feeds a sampled token to a constrained sequence's matcher: the finish it implies.
  static seq_finish advance_grammar(sequence& s, int32_t token, seq_finish why);
  sequence* lookup(uint64_t seq_id);

  scheduler_config cfg_;
  std::unordered_map<uint64_t, std::unique_ptr<sequence>> seqs_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> groups_;
  std::vector<sequence*> running_;           ///< admission order
  std::deque<sequence*> waiting_;            ///< (priority, arrival) order
  std::vector<kv_fork> pending_forks_;
  std::vector<kv_free> pending_frees_;
  std::vector<std::pair<uint64_t, int32_t>> deferred_aborts_;
  std::vector<planned> planned_;
  std::deque<step_record> in_flight_;       ///< oldest first
  bool awaiting_answer_ = false;
  bool ahead_ = false;                       ///< the outstanding reservation plans ahead
  uint64_t next_seq_id_ = 1;
  uint64_t next_arrival_ = 0;
  uint64_t next_step_id_ = 1;
  scheduler_counters counters_;
  scheduler_clock clock_;
};

}  // namespace actorserve::actors
