// The scheduler actor: routes messages to scheduler_policy and supervision_policy; nothing here
// ever waits. At most one reservation is outstanding; with async scheduling up to two steps are
// in flight: as soon as step N is sent to the executor, step N+1 is planned (plan_ahead) and sent
// too, so the executor never waits for the host between steps. It carries out the supervisor's
// decisions: a failed or overdue step restarts the executor, resets the KV pool and requeues
// every running sequence for recompute; giving up fails every request and refuses new ones. It
// records each step's busy and idle time (engine_stats).
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "actors/supervision_policy.hpp"
#include "config/check.hpp"
#include "config/log.hpp"

namespace actorserve::actors {

namespace {

struct scheduler_state {
  std::unique_ptr<scheduler_policy> policy;
  kv_block_manager_actor block_manager;
  executor_actor executor;
  std::shared_ptr<stats_board> stats;
  std::unordered_map<uint64_t, request_actor> requests;  ///< group id -> request actor
  std::map<caf::actor_addr, uint64_t> groups;          ///< request actor -> group id
  bool reserving = false;                              ///< a reservation is outstanding
  bool reservation_runs = false;                       ///< it plans sequences, not only frees or forks
  size_t max_in_flight = 2;                            ///< 1 without async scheduling
  std::unique_ptr<supervision_policy> supervisor;
  struct flight {
    uint64_t step_id;
    std::chrono::steady_clock::time_point started;     ///< sent, or the step before it completed
    bool back_to_back;                                 ///< no idle engine since the step before
    bool decode;                                       ///< every sequence decodes one token
    size_t num_seqs;
    int64_t num_tokens;                                ///< new tokens of all its sequences
  };
  std::deque<flight> in_flight;                        ///< the steps the executor owes us, oldest first
  std::deque<gpu::step_result> deferred;               ///< results that arrived during a reservation
  bool went_idle = true;                               ///< nothing to run since the last step
  bool watchdog_armed = false;
  uint32_t held = 0;                                   ///< enqueues of submitted batches still to come
  uint64_t hold_id = 0;                                ///< the latest hold (its timeout's tag)
  /// The executor is being replaced, or the engine gave up: nothing is planned or applied.
  bool halted() const { return supervisor->restarting() || supervisor->gave_up(); }
  static inline const char* name = "scheduler";
};

using scheduler_self = scheduler_actor::stateful_pointer<scheduler_state>;

/// How long a submitted batch may hold planning back while its requests reach the scheduler
/// (they arrive within milliseconds; this only bounds a stall should one never come).
constexpr std::chrono::milliseconds kBatchHoldTimeout{1000};

void publish(scheduler_self self) {
  auto& st = self->state;
  st.stats->publish(st.policy->counters(), st.policy->num_running(), st.policy->num_waiting());
}

void route(scheduler_self self, std::vector<seq_output>& outs) {
  if (outs.empty()) return;
  std::unordered_map<uint64_t, output_batch> by_group;
  for (auto& o : outs) by_group[o.group_id].outputs.push_back(std::move(o));
  for (auto& [group, batch] : by_group) {
    auto it = self->state.requests.find(group);
    if (it != self->state.requests.end()) self->send(it->second, outputs_atom::value, std::move(batch));
  }
}

void kick(scheduler_self self);
void on_answer(scheduler_self self, const kv_answer& a, uint64_t epoch);
void on_step_done(scheduler_self self, gpu::step_result& r);
void on_executor_failure(scheduler_self self, const std::string& why, bool wedged);

void reserve(scheduler_self self, kv_reservation r) {
  self->state.reservation_runs = !r.items.empty();
  self->request(self->state.block_manager, caf::infinite, reserve_atom::value, std::move(r))
      .then([self, epoch = self->state.supervisor->epoch()](const kv_answer& a) { on_answer(self, a, epoch); },
            [self](caf::error& e) {
              log::error("scheduler: the block manager did not answer: {}", caf::to_string(e));
              self->quit(e);
            });
}

void arm_watchdog(scheduler_self self) {
  auto& st = self->state;
  if (st.watchdog_armed) return;
  st.watchdog_armed = true;
  self->delayed_send(self, st.supervisor->watchdog_period(), watchdog_atom::value);
}

void send_step(scheduler_self self, gpu::step_batch step) {
  auto& st = self->state;
  const bool decode = std::all_of(step.seqs.begin(), step.seqs.end(),
                                  [](const gpu::step_sequence& q) { return q.new_tokens.size() == 1; });
  int64_t tokens = 0;
  for (const gpu::step_sequence& q : step.seqs) tokens += static_cast<int64_t>(q.new_tokens.size());
  st.in_flight.push_back(
      {step.step_id, std::chrono::steady_clock::now(), !st.went_idle, decode, step.seqs.size(), tokens});
  st.went_idle = false;
  arm_watchdog(self);
  self->send(st.executor, run_atom::value, std::move(step), scheduler_actor{self});
}

void on_answer(scheduler_self self, const kv_answer& a, uint64_t epoch) {
  auto& st = self->state;
  if (epoch != st.supervisor->epoch() || st.supervisor->gave_up()) {  // the pool was reset meanwhile
    st.reserving = false;
    kick(self);
    return;
  }
  auto d = st.policy->on_answer(a);
  route(self, d.failed);
  if (d.retry) {
    reserve(self, std::move(*d.retry));
    return;
  }
  st.reserving = false;
  if (d.step) send_step(self, std::move(*d.step));
  // Results that came in while the pool answered, in step order.
  while (!st.deferred.empty() && !st.reserving && !st.halted()) {
    gpu::step_result r = std::move(st.deferred.front());
    st.deferred.pop_front();
    on_step_done(self, r);
  }
  if (st.reserving || st.halted()) return;
  publish(self);
  if (d.step) {
    kick(self);  // plan the next step while this one runs
  } else if (st.in_flight.empty()) {
    st.stats->mark_progress();
    // Plan again after a reservation that only freed or forked blocks (a request that arrived
    // meanwhile found `reserving` set and was not planned; nothing else would wake us for it),
    // or after failing sequences that never fit.
    if (!d.failed.empty() || !st.reservation_runs) kick(self);
  }
}

void kick(scheduler_self self) {
  auto& st = self->state;
  if (st.supervisor->gave_up()) {
    publish(self);
    return;
  }
  if (st.held > 0 || st.reserving || st.supervisor->restarting() || st.in_flight.size() >= st.max_in_flight) return;
  auto r = st.in_flight.empty() ? st.policy->plan() : st.policy->plan_ahead();
  publish(self);
  if (!r) {
    if (st.in_flight.empty()) {
      st.went_idle = true;
      st.stats->mark_progress();
      st.supervisor->on_progress();  // restarted with nothing left to run
      st.stats->restarting = st.supervisor->recovering();
    }
    return;
  }
  st.reserving = true;
  reserve(self, std::move(*r));
}

/// Adds a completed step's busy time and the device's idle time before it to the stats (a step
/// not run back to back with the one before: its busy time only, apart).
void record_timing(scheduler_self self, const scheduler_state::flight& f, const gpu::step_result& r) {
  auto& s = *self->state.stats;
  constexpr auto relaxed = std::memory_order_relaxed;
  const auto busy = static_cast<int64_t>(r.device_ms * 1000.0);
  if (!f.back_to_back || r.idle_before_ms < 0) {
    if (busy > 0) s.untimed_busy_us.fetch_add(busy, relaxed);
    return;
  }
  const auto idle = static_cast<int64_t>(r.idle_before_ms * 1000.0);
  s.timed_steps.fetch_add(1, relaxed);
  s.timed_tokens.fetch_add(f.num_tokens, relaxed);
  s.step_busy_us.fetch_add(busy, relaxed);
  s.step_idle_us.fetch_add(idle, relaxed);
  if (!f.decode) return;
  s.decode_steps.fetch_add(1, relaxed);
  s.decode_seqs.fetch_add(static_cast<int64_t>(f.num_seqs), relaxed);
  s.decode_busy_us.fetch_add(busy, relaxed);
  s.decode_idle_us.fetch_add(idle, relaxed);
}

void on_step_done(scheduler_self self, gpu::step_result& r) {
  auto& st = self->state;
  const bool ours = std::any_of(st.in_flight.begin(), st.in_flight.end(),
                                [&](const scheduler_state::flight& f) { return f.step_id == r.step_id; });
  if (st.supervisor->gave_up() || !ours) {
    log::warn("scheduler: ignoring the result of step {} (not a step in flight)", r.step_id);
    return;
  }
  if (st.reserving) {  // the policy awaits the pool's answer: apply this result after it
    st.deferred.push_back(std::move(r));
    return;
  }
  AS_CHECK(st.in_flight.front().step_id == r.step_id, "the executor completed steps out of order");
  if (!r.outcome.ok()) {
    on_executor_failure(self, fmt::format("step {} failed: {}", r.step_id, r.outcome.err().message), false);
    return;
  }
  record_timing(self, st.in_flight.front(), r);
  st.stats->add_expert_tokens(r.expert_tokens);
  st.stats->cascade_seqs.fetch_add(r.cascade_seqs, std::memory_order_relaxed);
  st.in_flight.pop_front();
  if (!st.in_flight.empty()) st.in_flight.front().started = std::chrono::steady_clock::now();
  auto outs = st.policy->on_step_done(r);
  route(self, outs);
  st.stats->mark_progress();
  st.supervisor->on_progress();  // the first good step after a restart: healthy again
  st.stats->restarting = st.supervisor->recovering();
  kick(self);
}

/// Fails every request with the supervisor's message and refuses new ones; the engine stays
/// unhealthy.
void give_up(scheduler_self self) {
  auto& st = self->state;
  const std::string& msg = st.supervisor->give_up_message();
  log::error("{}; failing every request", msg);
  st.stats->give_up(msg);
  for (const auto& [group, requester] : st.requests) self->send(requester, fail_atom::value, msg);
  publish(self);
}

/// The executor's restart answered: reset the pool to the fresh executor's size and plan again,
/// or give up.
void on_restarted(scheduler_self self, int32_t num_blocks, const std::string& err) {
  auto& st = self->state;
  const auto pool_size = st.supervisor->on_restarted(num_blocks, err);
  if (!pool_size) {
    give_up(self);
    return;
  }
  // Sent before the next reservation, so the pool is fresh when it arrives.
  self->send(st.block_manager, reset_atom::value, *pool_size);
  st.stats->executor_restarts.fetch_add(1);
  log::info("scheduler: executor restarted ({} KV blocks); recomputing {} sequences", *pool_size,
            st.policy->num_waiting());
  st.stats->mark_progress();
  kick(self);
}

/// The step in flight failed (`wedged`: it never returned). Both steps in flight are lost and
/// every running sequence is requeued for recompute; then the supervisor's verdict: restart the
/// executor (and reset the pool), or give up.
void on_executor_failure(scheduler_self self, const std::string& why, bool wedged) {
  auto& st = self->state;
  log::error("scheduler: executor failure: {}; restarting the executor", why);
  const auto verdict = st.supervisor->on_failure(why, std::chrono::steady_clock::now());
  st.stats->restarting = st.supervisor->recovering();
  st.in_flight.clear();
  st.deferred.clear();
  st.went_idle = true;
  st.policy->requeue_all_for_recompute();
  if (verdict == supervision_policy::verdict::give_up) {
    self->send(st.block_manager, reset_atom::value, st.supervisor->num_blocks());
    give_up(self);
    return;
  }
  publish(self);
  self->request(st.executor, caf::infinite, restart_atom::value, wedged)
      .then([self](int32_t num_blocks, const std::string& err) { on_restarted(self, num_blocks, err); },
            [self](caf::error& e) { on_restarted(self, 0, caf::to_string(e)); });
}

scheduler_actor::behavior_type scheduler(scheduler_self self, scheduler_config cfg,
                                         kv_block_manager_actor block_manager, executor_actor executor,
                                         std::shared_ptr<stats_board> stats, supervision_config sup) {
  auto& st = self->state;
  st.supervisor = std::make_unique<supervision_policy>(sup);
  st.max_in_flight = cfg.async_scheduling ? 2 : 1;
  st.policy = std::make_unique<scheduler_policy>(std::move(cfg));
  st.block_manager = std::move(block_manager);
  st.executor = std::move(executor);
  st.stats = std::move(stats);
  // Request actors are monitored, never linked: one client going away must not take the others.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.groups.find(dm.source);
    if (it == st.groups.end()) return;
    st.policy->abort(it->second);
    st.requests.erase(it->second);
    st.groups.erase(it);
    kick(self);
  });
  return {
      [self](enqueue_atom, new_request& r, const request_actor& requester) {
        auto& st = self->state;
        if (st.supervisor->gave_up()) {
          self->send(requester, fail_atom::value, st.supervisor->give_up_message());
          return;
        }
        self->monitor(requester);
        st.groups[requester.address()] = r.group_id;
        st.requests[r.group_id] = requester;
        st.policy->add(std::move(r));
        if (st.held > 0 && --st.held > 0) return;  // more of a submitted batch are on their way
        kick(self);
      },
      [self](hold_atom, uint32_t n) {
        auto& st = self->state;
        st.held += n;
        self->delayed_send(self, kBatchHoldTimeout, unhold_atom::value, ++st.hold_id);
      },
      [self](unhold_atom, uint64_t id) {
        auto& st = self->state;
        if (id != st.hold_id || st.held == 0) return;
        log::warn("scheduler: {} requests of a submitted batch did not arrive within {} ms; planning without them",
                  st.held, kBatchHoldTimeout.count());
        st.held = 0;
        kick(self);
      },
      [self](abort_atom, uint64_t group_id, int32_t index) {
        self->state.policy->abort(group_id, index);
        kick(self);
      },
      [self](step_done_atom, gpu::step_result& r) { on_step_done(self, r); },
      [self](watchdog_atom) {
        auto& st = self->state;
        st.watchdog_armed = false;
        if (st.in_flight.empty() || st.halted()) return;
        const auto& oldest = st.in_flight.front();
        if (auto why = st.supervisor->overdue(oldest.step_id, oldest.started, std::chrono::steady_clock::now())) {
          on_executor_failure(self, *why, true);
          return;
        }
        arm_watchdog(self);
      },
  };
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_config cfg, kv_block_manager_actor block_manager,
                                executor_actor executor, std::shared_ptr<stats_board> stats, supervision_config sup) {
  return sys.spawn(scheduler, std::move(cfg), std::move(block_manager), std::move(executor), std::move(stats), sup);
}

}  // namespace actorserve::actors
