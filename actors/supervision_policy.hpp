#pragma once
/// The supervision policy (no CAF): how the scheduler supervises the executor. A failed step, or
/// one overdue past the step timeout, restarts the executor; more than `max_restarts` failures
/// within `restart_window`, or a restart that fails, give up. The scheduler actor routes the
/// messages (restart, reset, fail) that carry these decisions out.
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace actorserve::actors {

/// How the scheduler supervises the executor.
struct supervision_config {
  std::chrono::milliseconds step_timeout{60000};    ///< watchdog: a step taking longer has failed
  int32_t max_restarts = 3;                         ///< restarts allowed within `restart_window`
  std::chrono::milliseconds restart_window{60000};
  int32_t num_blocks = 0;                           ///< the pool's size cap after a restart (0: none)
};

class supervision_policy {
 public:
  using clock = std::chrono::steady_clock;

  explicit supervision_policy(supervision_config cfg);

  /// What to do about a failed step.
  enum class verdict { restart, give_up };

  /// A step failed at `now` (`why` says how). Starts a new epoch; restarts, or gives up once the
  /// failures within the window exceed `max_restarts`.
  verdict on_failure(const std::string& why, clock::time_point now);
  /// The restart answered: the fresh executor's `num_blocks`, or `error` when it failed. Returns
  /// the size of the fresh pool, or nothing when the engine gives up.
  std::optional<int32_t> on_restarted(int32_t num_blocks, const std::string& error);
  /// A good step completed, or nothing is left to run: the engine is healthy again.
  void on_progress() { recovering_ = false; }

  /// The watchdog: why the oldest step in flight (`step_id`, sent at `started`) has failed, or
  /// nothing while it is within the step timeout.
  std::optional<std::string> overdue(uint64_t step_id, clock::time_point started, clock::time_point now) const;
  /// How often the watchdog looks at the oldest step in flight.
  std::chrono::milliseconds watchdog_period() const;

  /// Waiting for a fresh executor: nothing is planned meanwhile.
  bool restarting() const { return restarting_; }
  /// From a failure until the first good step after it: the engine reports itself unhealthy.
  bool recovering() const { return recovering_; }
  /// Failed repeatedly: every request fails from now on, with give_up_message().
  bool gave_up() const { return gave_up_; }
  const std::string& give_up_message() const { return give_up_message_; }
  /// Failures so far: an answer requested in an older epoch is stale.
  uint64_t epoch() const { return epoch_; }
  /// The pool's size cap, also for the reset sent when giving up.
  int32_t num_blocks() const { return cfg_.num_blocks; }

 private:
  void give_up(const std::string& why);

  supervision_config cfg_;
  std::deque<clock::time_point> failures_;   ///< within the restart window, oldest first
  std::string last_failure_;                 ///< why the latest step failed
  std::string give_up_message_;
  uint64_t epoch_ = 0;
  bool restarting_ = false;
  bool recovering_ = false;
  bool gave_up_ = false;
};

}  // namespace actorserve::actors
