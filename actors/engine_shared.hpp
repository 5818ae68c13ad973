#pragma once
/// Internal (no CAF): state the actors publish for other threads. engine::stats() reads it from
/// any thread; the scheduler, block manager and request actors write it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace actorserve::actors {

struct stats_board {
  std::atomic<int64_t> num_running{0}, num_waiting{0};
  std::atomic<int64_t> kv_total{0}, kv_used{0}, kv_free{0}, kv_cached{0}, kv_shared{0};
  std::atomic<int64_t> prefix_queries{0}, prefix_hits{0};
  std::atomic<int64_t> preemptions{0}, recomputed_tokens{0}, computed_tokens{0};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0}, steps{0}, executor_restarts{0};
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

  void mark_progress() {
    last_progress_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }

 private:
  mutable std::mutex failure_mu_;
  std::string failure_;
};

}  // namespace actorserve::actors
