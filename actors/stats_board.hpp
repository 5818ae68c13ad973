#pragma once
/// Internal (no CAF): the stats board, the counters and health flags the actors publish for other
/// threads. engine::stats() reads it from any thread; the scheduler, block manager and request
/// actors write it. NOTE: each field has the name of its engine_stats field, and of its Prometheus
/// series without `actorserve:` and `_total` (server/metrics.cpp).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "actors/kv_types.hpp"
#include "actors/scheduler_policy.hpp"

namespace actorserve::actors {

struct stats_board {
  std::atomic<int64_t> num_running{0}, num_waiting{0};
  std::atomic<int64_t> kv_blocks_total{0}, kv_blocks_used{0}, kv_blocks_free{0}, kv_blocks_cached{0},
      kv_blocks_shared{0};
  std::atomic<int64_t> prefix_cache_queries{0}, prefix_cache_hits{0};
  std::atomic<int64_t> num_preemptions{0}, num_recomputed_tokens{0}, num_computed_tokens{0};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0}, num_steps{0}, executor_restarts{0};
  std::atomic<int64_t> requests_finished{0}, requests_cancelled{0};
  std::atomic<int64_t> timed_steps{0}, timed_tokens{0}, step_busy_us{0}, step_idle_us{0};  ///< see engine_stats
  std::atomic<int64_t> decode_steps{0}, decode_seqs{0}, decode_busy_us{0}, decode_idle_us{0};
  std::atomic<int64_t> last_progress_ns{0};   ///< steady_clock time of the last step or idle point
  std::atomic<bool> alive{false};
  std::atomic<bool> restarting{false};        ///< a step failed; the executor is being replaced
  std::atomic<bool> gave_up{false};           ///< failed repeatedly: every request fails from now on

  /// Records why the engine gave up (read by submit to refuse new requests).
  void give_up(std::string why) {
    {
      std::lock_guard<std::mutex> l(failure_mu_);
      failure_ = std::move(why);
    }
    gave_up.store(true);
  }
  std::string failure() const {
    std::lock_guard<std::mutex> l(failure_mu_);
    return failure_;
  }

  /// The block manager publishes the pool's occupancy after each change.
  void publish(const kv_pool_counts& c) {
    constexpr auto relaxed = std::memory_order_relaxed;
    kv_blocks_total.store(c.total, relaxed);
    kv_blocks_used.store(c.used, relaxed);
    kv_blocks_free.store(c.free, relaxed);
    kv_blocks_cached.store(c.cached, relaxed);
    kv_blocks_shared.store(c.shared, relaxed);
  }

  /// The scheduler publishes its totals and queue lengths after each decision.
  void publish(const scheduler_counters& c, size_t running, size_t waiting) {
    constexpr auto relaxed = std::memory_order_relaxed;
    num_running.store(static_cast<int64_t>(running), relaxed);
    num_waiting.store(static_cast<int64_t>(waiting), relaxed);
    prefix_cache_queries.store(c.prefix_cache_queries, relaxed);
    prefix_cache_hits.store(c.prefix_cache_hits, relaxed);
    num_preemptions.store(c.num_preemptions, relaxed);
    num_recomputed_tokens.store(c.num_recomputed_tokens, relaxed);
    num_computed_tokens.store(c.num_computed_tokens, relaxed);
    prompt_tokens.store(c.prompt_tokens, relaxed);
    generation_tokens.store(c.generation_tokens, relaxed);
    num_steps.store(c.num_steps, relaxed);
  }

  void mark_progress() {
    last_progress_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }

 private:
  mutable std::mutex failure_mu_;
  std::string failure_;
};

}  // namespace actorserve::actors
