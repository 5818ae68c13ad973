#pragma once
/// Internal (no CAF): the stats board, the counters and health flags the actors publish for other
/// threads. engine::stats() reads it from any thread; the scheduler, block manager and request
/// actors write it. NOTE: each field has the name of its engine_stats field, and of its Prometheus
/// series without `actorserve:` and `_total` (server/metrics.cpp).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine.hpp"
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
  std::atomic<int64_t> untimed_busy_us{0};  ///< see engine_stats
  std::atomic<int64_t> cascade_seqs{0};   ///< see engine_stats
  std::array<std::atomic<int64_t>, num_iteration_tokens_buckets> iteration_tokens{};  ///< see engine_stats
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
    for (size_t i = 0; i < iteration_tokens.size(); ++i) iteration_tokens[i].store(c.iteration_tokens[i], relaxed);
  }

  /// Mixture of experts: the sparse layers and experts per layer (the executor's info), once at
  /// start; add_expert_tokens then sums each step's routed tokens (gpu::step_result).
  void set_moe_shape(std::vector<int32_t> layers, int32_t num_experts) {
    std::lock_guard<std::mutex> l(moe_mu_);
    moe_layers_ = std::move(layers);
    num_experts_ = num_experts;
    expert_tokens_.assign(moe_layers_.size() * static_cast<size_t>(std::max(num_experts, 0)), 0);
  }
  void add_expert_tokens(const std::vector<int64_t>& step) {
    if (step.empty()) return;
    std::lock_guard<std::mutex> l(moe_mu_);
    if (step.size() != expert_tokens_.size()) return;  // another shape: not this model's
    for (size_t i = 0; i < step.size(); ++i) expert_tokens_[i] += step[i];
  }
  /// Copies the routed-token totals into `e` (engine_stats' moe fields).
  void read_experts(engine_stats& e) const {
    std::lock_guard<std::mutex> l(moe_mu_);
    e.moe_layers = moe_layers_;
    e.num_experts = num_experts_;
    e.moe_expert_tokens = expert_tokens_;
  }

  void mark_progress() {
    last_progress_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }

 private:
  mutable std::mutex failure_mu_;
  std::string failure_;
  mutable std::mutex moe_mu_;
  std::vector<int32_t> moe_layers_;
  int32_t num_experts_ = 0;
  std::vector<int64_t> expert_tokens_;
};

}  // namespace actorserve::actors
