// The scheduler actor: routes messages to scheduler_policy. One reservation or step is
// outstanding at a time; nothing here ever waits.
#include <map>
#include <unordered_map>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "config/log.hpp"

namespace actorserve::actors {

namespace {

struct scheduler_state {
  std::unique_ptr<scheduler_policy> policy;
  caf::actor block_manager;
  caf::actor executor;
  std::shared_ptr<stats_board> stats;
  std::unordered_map<uint64_t, caf::actor> requests;   ///< group id -> request actor
  std::map<caf::actor_addr, uint64_t> groups;          ///< request actor -> group id
  bool busy = false;                                   ///< a reservation or a step is outstanding
  static inline const char* name = "scheduler";
};

using scheduler_actor = caf::stateful_actor<scheduler_state>;

void publish(scheduler_actor* self) {
  auto& st = self->state;
  const auto& c = st.policy->counters();
  auto& s = *st.stats;
  constexpr auto relaxed = std::memory_order_relaxed;
  s.num_running.store(static_cast<int64_t>(st.policy->num_running()), relaxed);
  s.num_waiting.store(static_cast<int64_t>(st.policy->num_waiting()), relaxed);
  s.prefix_queries.store(c.prefix_queries, relaxed);
  s.prefix_hits.store(c.prefix_hits, relaxed);
  s.preemptions.store(c.num_preemptions, relaxed);
  s.recomputed_tokens.store(c.num_recomputed_tokens, relaxed);
  s.computed_tokens.store(c.num_computed_tokens, relaxed);
  s.prompt_tokens.store(c.prompt_tokens, relaxed);
  s.generation_tokens.store(c.generation_tokens, relaxed);
  s.steps.store(c.num_steps, relaxed);
}

void route(scheduler_actor* self, std::vector<seq_output>& outs) {
  if (outs.empty()) return;
  std::unordered_map<uint64_t, output_batch> by_group;
  for (auto& o : outs) by_group[o.group_id].outputs.push_back(std::move(o));
  for (auto& [group, batch] : by_group) {
    auto it = self->state.requests.find(group);
    if (it != self->state.requests.end()) self->send(it->second, outputs_atom::value, std::move(batch));
  }
}

void kick(scheduler_actor* self);

void on_answer(scheduler_actor* self, const kv_answer& a);

void reserve(scheduler_actor* self, kv_reservation r) {
  self->request(self->state.block_manager, caf::infinite, reserve_atom::value, std::move(r))
      .then([self](const kv_answer& a) { on_answer(self, a); },
            [self](caf::error& e) {
              log::error("scheduler: the block manager did not answer: {}", caf::to_string(e));
              self->quit(e);
            });
}

void on_answer(scheduler_actor* self, const kv_answer& a) {
  auto& st = self->state;
  auto d = st.policy->on_answer(a);
  route(self, d.failed);
  if (d.retry) {
    reserve(self, std::move(*d.retry));
    return;
  }
  if (d.step) {
    self->send(st.executor, run_atom::value, std::move(*d.step));
    return;
  }
  st.busy = false;
  st.stats->mark_progress();
  publish(self);
  if (!d.failed.empty()) kick(self);
}

void kick(scheduler_actor* self) {
  auto& st = self->state;
  if (st.busy) return;
  auto r = st.policy->plan();
  publish(self);
  if (!r) {
    st.stats->mark_progress();
    return;
  }
  st.busy = true;
  reserve(self, std::move(*r));
}

caf::behavior scheduler(scheduler_actor* self, scheduler_config cfg, caf::actor block_manager, caf::actor executor,
                        std::shared_ptr<stats_board> stats) {
  auto& st = self->state;
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
      [self](enqueue_atom, new_request& r, caf::actor& requester) {
        auto& st = self->state;
        self->monitor(requester);
        st.groups[requester.address()] = r.group_id;
        st.requests[r.group_id] = requester;
        st.policy->add(std::move(r));
        kick(self);
      },
      [self](abort_atom, uint64_t group_id, int32_t index) {
        self->state.policy->abort(group_id, index);
        kick(self);
      },
      [self](step_done_atom, gpu::step_result& r) {
        auto& st = self->state;
        if (!r.outcome.ok()) log::error("scheduler: step {} failed: {}", r.step_id, r.outcome.err().message);
        auto outs = st.policy->on_step_done(r);
        route(self, outs);
        st.busy = false;
        st.stats->mark_progress();
        kick(self);
      },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, scheduler_config cfg, caf::actor block_manager,
                           caf::actor executor, std::shared_ptr<stats_board> stats) {
  return sys.spawn(scheduler, std::move(cfg), std::move(block_manager), std::move(executor), std::move(stats));
}

}  // namespace actorserve::actors
