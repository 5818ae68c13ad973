// The engine process's side of the network: the gate (the actor `actorserve engine` publishes)
// and one relay per remote request. The relay is a request actor to the scheduler, so a remote
// request is scheduled, preempted, recomputed and aborted exactly as a local one; it forwards
// each step's outputs to the front end that submitted it and monitors that front end: when the
// front end's process or connection goes away the relay ends, and the scheduler, which monitors
// it, aborts the request and frees its blocks.
#include <map>
#include <set>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "config/log.hpp"

namespace actorserve::actors {

namespace {

// -- relay: one remote request ------------------------------------------------------------------

struct relay_state {
  uint64_t key = 0;                  ///< the front end's id of the request
  uint64_t group_id = 0;             ///< this engine's id of it
  engine_client_actor client;
  scheduler_actor scheduler;
  std::function<void()> on_abandoned;
  int32_t num_choices = 0;
  std::set<int32_t> finished;        ///< choice indexes that ended (finished or aborted)
  static inline const char* name = "relay";
};

using relay_self = relay_actor::stateful_pointer<relay_state>;

void end_relay(relay_self self) {
  self->demonitor(self->state.scheduler.address());
  self->demonitor(self->state.client.address());
  self->quit();
}

relay_actor::behavior_type relay(relay_self self, new_request nr, uint64_t key, engine_client_actor client,
                                 scheduler_actor scheduler, std::function<void()> on_abandoned) {
  auto& st = self->state;
  st.key = key;
  st.group_id = nr.group_id;
  st.client = std::move(client);
  st.scheduler = std::move(scheduler);
  st.on_abandoned = std::move(on_abandoned);
  st.num_choices = std::max(1, nr.params->n);
  self->monitor(st.client);
  self->monitor(st.scheduler);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    // NOTE: a scheduler that stopped means this engine is stopping: the front end moves the
    // request to another engine when the connection closes, so no failure is sent.
    if (dm.source != st.scheduler.address())
      st.on_abandoned();  // the front end is gone: ending here makes the scheduler abort the request
    end_relay(self);
  });
  self->send(st.scheduler, enqueue_atom::value, std::move(nr), request_actor{self});
  return {
      [self](outputs_atom, output_batch& batch) {
        auto& st = self->state;
        for (const auto& o : batch.outputs)
          if (o.finish != seq_finish::none) st.finished.insert(o.index);
        self->send(st.client, outputs_atom::value, st.key, std::move(batch));
        if (static_cast<int32_t>(st.finished.size()) >= st.num_choices) end_relay(self);
      },
      [self](fail_atom, const std::string& why) {
        self->send(self->state.client, fail_atom::value, self->state.key, why);
        end_relay(self);
      },
      [self](cancel_atom) {
        self->send(self->state.scheduler, abort_atom::value, self->state.group_id, int32_t{-1});
        end_relay(self);
      },
      [](deadline_atom) {},  // deadlines are the front end's
      [self](abort_atom, int32_t index) {
        auto& st = self->state;
        self->send(st.scheduler, abort_atom::value, st.group_id, index);
        // NOTE: an aborted choice sends no more outputs; it counts as finished here.
        st.finished.insert(index);
        if (static_cast<int32_t>(st.finished.size()) >= st.num_choices) end_relay(self);
      },
  };
}

// -- gate: the published actor --------------------------------------------------------------------

struct gate_state {
  gate_context ctx;
  std::map<std::pair<caf::actor_addr, uint64_t>, relay_actor> relays;   ///< (front end, key) -> relay
  std::map<caf::actor_addr, std::pair<caf::actor_addr, uint64_t>> by_relay;
  std::map<caf::actor_addr, engine_client_actor> subscribers;            ///< front ends that said hello
  static inline const char* name = "engine_gate";
};

using gate_self = engine_gate_actor::stateful_pointer<gate_state>;

engine_client_actor sender_of(gate_self self) {
  return caf::actor_cast<engine_client_actor>(self->current_sender());
}

engine_gate_actor::behavior_type gate(gate_self self, gate_context ctx) {
  self->state.ctx = std::move(ctx);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (auto it = st.by_relay.find(dm.source); it != st.by_relay.end()) {
      st.relays.erase(it->second);
      st.by_relay.erase(it);
      return;
    }
    if (st.subscribers.erase(dm.source) > 0) log::info("engine: a front end went away");
  });
  self->send(self, tick_atom::value);
  return {
      [self](hello_atom, int32_t version) -> engine_info {
        auto& st = self->state;
        auto client = sender_of(self);
        if (version != wire_version)
          log::warn("engine: a front end speaks wire version {}, this engine {}", version, wire_version);
        else if (client && st.subscribers.emplace(client.address(), client).second) {
          self->monitor(client);
          log::info("engine: a front end connected");
          self->send(client, load_atom::value, st.ctx.stats());
        }
        return st.ctx.info;
      },
      [self](submit_atom, wire_request& r) {
        auto& st = self->state;
        auto client = sender_of(self);
        if (!client) return;
        generation_request check;
        check.prompt_ids = r.tokens;
        check.params = r.params;
        if (auto ok = st.ctx.admissible(check); !ok) {
          self->send(client, fail_atom::value, r.key, ok.err().message);
          return;
        }
        new_request nr;
        nr.group_id = st.ctx.next_group();
        nr.prompt = std::move(r.tokens);
        nr.params = std::make_shared<const sampling_params>(std::move(r.params));
        nr.seed = r.seed;
        nr.priority = r.priority;
        nr.num_generated = r.num_generated;
        nr.index = r.index;
        auto hdl = self->spawn(relay, std::move(nr), r.key, client, st.ctx.scheduler, st.ctx.on_abandoned);
        self->monitor(hdl);
        st.relays[{client.address(), r.key}] = hdl;
        st.by_relay[hdl.address()] = {client.address(), r.key};
      },
      [self](abort_atom, uint64_t key, int32_t index) {
        auto& st = self->state;
        auto it = st.relays.find({self->current_sender() ? self->current_sender()->address() : caf::actor_addr{}, key});
        if (it == st.relays.end()) return;
        if (index < 0)
          self->send(it->second, cancel_atom::value);
        else
          self->send(it->second, abort_atom::value, index);
      },
      [self](tick_atom) {
        auto& st = self->state;
        if (!st.subscribers.empty()) {
          const engine_stats s = st.ctx.stats();
          for (const auto& [addr, client] : st.subscribers) self->send(client, load_atom::value, s);
        }
        self->delayed_send(self, load_report_period, tick_atom::value);
      },
  };
}

}  // namespace

engine_gate_actor spawn_engine_gate(caf::actor_system& sys, gate_context ctx) {
  return sys.spawn(gate, std::move(ctx));
}

}  // namespace actorserve::actors
