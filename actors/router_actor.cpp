// The router of a front end of remote engines: the request actors' upstream (enqueue, abort)
// and the engines' client (outputs, failures, load reports). Each request goes to the engine
// router_policy picks, as one engine request with a key of its own. The router forwards every
// output to the request actor and keeps the tokens streamed per choice; when an engine goes down
// (its gate's monitor fires: process killed, host lost, connection cut) each request it held is
// submitted again elsewhere, a choice with tokens already streamed as prompt + those tokens and
// its own seed and generated count, so counter-based sampling draws what the dead engine would
// have drawn and the client's stream continues without a gap or a repeat. Engines that are down
// are dialled again every reconnect_period; one that answers rejoins the routing.
#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "actors/actor_spawn.hpp"
#include "actors/block_hash.hpp"
#include "actors/messages.hpp"
#include "actors/router_policy.hpp"
#include "config/log.hpp"

namespace actorserve::actors {

namespace {

constexpr std::chrono::milliseconds reconnect_period{250};
constexpr std::chrono::seconds handshake_timeout{10};
/// How long a request moved from an engine that went down waits for an engine when none is up.
constexpr std::chrono::seconds failover_wait{30};

struct engine_slot {
  host_port at;
  std::string address;
  engine_gate_actor gate;
  bool up = false;
  bool connecting = false;
  bool logged_down = false;            ///< "cannot reach" was logged (once per outage)
  engine_info info;
};

struct choice_track {
  std::vector<int32_t> streamed;       ///< token ids forwarded to the request actor
  bool done = false;
};

struct group_track {
  new_request req;
  request_actor requester;
  std::vector<choice_track> choices;
  std::vector<uint64_t> keys;          ///< its engine requests now
  bool all_done() const {
    return std::all_of(choices.begin(), choices.end(), [](const choice_track& c) { return c.done; });
  }
};

/// One engine request: a whole request (index -1) or one resumed choice.
struct route {
  uint64_t group = 0;
  size_t engine = 0;
  int32_t index = -1;
};

struct router_state {
  std::vector<engine_slot> engines;
  std::unique_ptr<router_policy> policy;
  caf::io::middleman_actor mm;
  std::shared_ptr<cluster_view> view;
  std::unordered_map<uint64_t, group_track> groups;
  std::unordered_map<uint64_t, route> routes;
  std::map<caf::actor_addr, uint64_t> group_of;      ///< request actor -> group
  std::map<caf::actor_addr, size_t> engine_of;       ///< gate -> engine index
  uint64_t next_key = 1;
  int32_t block_size = 0;                            ///< the first engine's (prefix-cache keys)
  /// Moved requests (group, index as for dispatch) waiting for an engine to come up, and until when.
  struct parked_request {
    uint64_t group;
    int32_t index;
    std::chrono::steady_clock::time_point until;
  };
  std::deque<parked_request> parked;
  static inline const char* name = "router";
};

using router_self = router_actor::stateful_pointer<router_state>;

void update_view(router_self self, size_t e, bool notify) {
  auto& st = self->state;
  {
    std::lock_guard<std::mutex> lock(st.view->mu);
    auto& node = st.view->nodes[e];
    node.up = st.engines[e].up;
    if (node.up && !st.view->first) st.view->first = st.engines[e].info;
  }
  if (notify) st.view->changed.notify_all();
}

template <class F>
void edit_node(router_self self, size_t e, F f) {
  std::lock_guard<std::mutex> lock(self->state.view->mu);
  f(self->state.view->nodes[e]);
}

std::vector<uint64_t> hashes_of(const router_state& st, const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h;
  if (st.block_size > 0) extend_block_hashes(h, tokens, st.block_size);
  return h;
}

/// Ends a request that cannot run anywhere.
void fail_group(router_self self, uint64_t gid, const std::string& why) {
  auto it = self->state.groups.find(gid);
  if (it == self->state.groups.end()) return;
  self->send(it->second.requester, fail_atom::value, why);
}

/// Sends one engine request of group `gid`: the whole request (index < 0) or choice `index`
/// resumed after the tokens it streamed. With no engine up, a request moved from an engine that
/// went down (`moved`) waits up to failover_wait for one; a new request fails.
void dispatch(router_self self, uint64_t gid, int32_t index, bool moved = false) {
  auto& st = self->state;
  auto& g = st.groups.at(gid);
  wire_request w;
  w.key = st.next_key++;
  w.tokens = g.req.prompt;
  w.params = *g.req.params;
  w.seed = g.req.seed;
  w.priority = g.req.priority;
  if (index >= 0) {
    const auto& streamed = g.choices[static_cast<size_t>(index)].streamed;
    w.tokens.insert(w.tokens.end(), streamed.begin(), streamed.end());
    w.num_generated = static_cast<int32_t>(streamed.size());
    w.index = index;
    if (w.params.n > 1) w.seed = child_seed(g.req.seed, index);
    w.params.n = 1;
  }
  const auto hashes = hashes_of(st, w.tokens);
  const auto e = st.policy->pick(hashes);
  if (!e) {
    if (moved)
      st.parked.push_back({gid, index, std::chrono::steady_clock::now() + failover_wait});
    else
      fail_group(self, gid, "no engine is up");
    return;
  }
  st.policy->on_routed(*e, hashes);
  st.routes[w.key] = {gid, *e, index};
  g.keys.push_back(w.key);
  edit_node(self, *e, [](engine_node& n) { ++n.requests_routed; });
  self->send(st.engines[*e].gate, submit_atom::value, std::move(w));
}

/// The engine request `key` ended (finished, failed, aborted or lost with its engine).
void drop_key(router_self self, uint64_t key, bool finished) {
  auto& st = self->state;
  auto it = st.routes.find(key);
  if (it == st.routes.end()) return;
  if (finished) st.policy->on_finished(it->second.engine);
  if (auto g = st.groups.find(it->second.group); g != st.groups.end()) std::erase(g->second.keys, key);
  st.routes.erase(it);
}

void drop_group(router_self self, uint64_t gid) {
  auto& st = self->state;
  auto it = st.groups.find(gid);
  if (it == st.groups.end()) return;
  for (uint64_t key : std::vector<uint64_t>(it->second.keys)) drop_key(self, key, true);
  self->demonitor(it->second.requester.address());
  st.group_of.erase(it->second.requester.address());
  st.groups.erase(it);
}

/// Aborts the group's engine requests that carry choice `index` (-1: all of them).
void abort_on_engines(router_self self, uint64_t gid, int32_t index) {
  auto& st = self->state;
  auto& g = st.groups.at(gid);
  for (uint64_t key : std::vector<uint64_t>(g.keys)) {
    const route r = st.routes.at(key);
    if (index >= 0 && r.index >= 0 && r.index != index) continue;
    self->send(st.engines[r.engine].gate, abort_atom::value, key, index);
    if (index < 0 || r.index == index || g.all_done()) drop_key(self, key, true);
  }
}

void on_outputs(router_self self, uint64_t key, output_batch& batch) {
  auto& st = self->state;
  auto rit = st.routes.find(key);
  if (rit == st.routes.end()) return;  // aborted meanwhile
  const route r = rit->second;
  auto& g = st.groups.at(r.group);
  for (auto& o : batch.outputs) {
    o.group_id = r.group;
    if (o.index < 0 || static_cast<size_t>(o.index) >= g.choices.size()) continue;
    auto& c = g.choices[static_cast<size_t>(o.index)];
    if (o.has_token) c.streamed.push_back(o.token.token_id);
    if (o.finish != seq_finish::none) c.done = true;
  }
  self->send(g.requester, outputs_atom::value, std::move(batch));
  const bool key_done = r.index < 0 ? g.all_done() : g.choices[static_cast<size_t>(r.index)].done;
  if (key_done) drop_key(self, key, true);
  if (g.all_done()) drop_group(self, r.group);
}

void engine_down(router_self self, size_t e, const caf::error& why) {
  auto& st = self->state;
  auto& slot = st.engines[e];
  if (!slot.up) return;
  st.engine_of.erase(slot.gate.address());
  slot.gate = engine_gate_actor();
  slot.up = false;
  st.policy->set_up(e, false);
  update_view(self, e, true);
  std::vector<uint64_t> lost;
  for (const auto& [key, r] : st.routes)
    if (r.engine == e) lost.push_back(key);
  std::sort(lost.begin(), lost.end());  // resubmit in arrival order
  log::warn("router: engine {} went down ({}); moving {} requests to other engines", slot.address,
            caf::to_string(why), lost.size());
  int64_t moved = 0;
  for (uint64_t key : lost) {
    const route r = st.routes.at(key);
    drop_key(self, key, false);
    auto git = st.groups.find(r.group);
    if (git == st.groups.end()) continue;
    auto& g = git->second;
    ++moved;
    const bool untouched = std::all_of(g.choices.begin(), g.choices.end(),
                                       [](const choice_track& c) { return c.streamed.empty() && !c.done; });
    if (r.index < 0 && untouched) {
      dispatch(self, r.group, -1, true);
      continue;
    }
    for (size_t i = 0; i < g.choices.size(); ++i) {
      if (g.choices[i].done || (r.index >= 0 && static_cast<size_t>(r.index) != i)) continue;
      dispatch(self, r.group, static_cast<int32_t>(i), true);
    }
  }
  edit_node(self, e, [moved](engine_node& n) { n.requests_resubmitted += moved; });
}

void on_hello(router_self self, size_t e, engine_gate_actor gate, const engine_info& info) {
  auto& st = self->state;
  auto& slot = st.engines[e];
  slot.connecting = false;
  if (info.version != wire_version) {
    if (!slot.logged_down)
      log::error("router: engine {} speaks wire version {}, this front end {}; not using it", slot.address,
                 info.version, wire_version);
    slot.logged_down = true;
    return;
  }
  if (st.block_size == 0) st.block_size = info.block_size;
  if (info.block_size != st.block_size)
    log::warn("router: engine {} has {}-token blocks, the first engine {}: cache-aware routing misses there",
              slot.address, info.block_size, st.block_size);
  slot.gate = std::move(gate);
  slot.info = info;
  slot.up = true;
  slot.logged_down = false;
  self->monitor(slot.gate);
  st.engine_of[slot.gate.address()] = e;
  st.policy->set_up(e, true);
  update_view(self, e, true);
  log::info("router: engine {} is up (model {}, {}-token blocks)", slot.address, info.model_name, info.block_size);
  // Requests moved from engines that went down while none was up go here now.
  auto waiting = std::move(st.parked);
  st.parked.clear();
  for (const auto& p : waiting) {
    auto g = st.groups.find(p.group);
    if (g == st.groups.end() || (p.index >= 0 && g->second.choices[static_cast<size_t>(p.index)].done)) continue;
    dispatch(self, p.group, p.index, true);
  }
}

/// Fails the moved requests that waited failover_wait for an engine in vain.
void expire_parked(router_self self) {
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  while (!st.parked.empty() && st.parked.front().until <= now) {
    fail_group(self, st.parked.front().group,
               fmt::format("no engine came back within {} s after the request's engine went down", failover_wait.count()));
    st.parked.pop_front();
  }
}

void connect_down_engines(router_self self) {
  auto& st = self->state;
  for (size_t e = 0; e < st.engines.size(); ++e) {
    auto& slot = st.engines[e];
    if (slot.up || slot.connecting) continue;
    slot.connecting = true;
    auto failed = [self, e](const caf::error& err) {
      auto& slot = self->state.engines[e];
      slot.connecting = false;
      if (!slot.logged_down) log::warn("router: cannot reach engine {}: {} (retrying)", slot.address, caf::to_string(err));
      slot.logged_down = true;
    };
    self->request(st.mm, handshake_timeout, caf::connect_atom::value, slot.at.host, slot.at.port)
        .then(
            [self, e, failed](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
              if (!ptr) {
                failed(caf::make_error(caf::sec::no_actor_published_at_port));
                return;
              }
              auto gate = caf::actor_cast<engine_gate_actor>(std::move(ptr));
              self->request(gate, handshake_timeout, hello_atom::value, wire_version)
                  .then([self, e, gate](const engine_info& info) { on_hello(self, e, gate, info); },
                        [failed](const caf::error& err) { failed(err); });
            },
            [failed](const caf::error& err) { failed(err); });
  }
}

router_actor::behavior_type router(router_self self, cluster_options c, caf::io::middleman_actor mm,
                                   std::shared_ptr<cluster_view> view) {
  auto& st = self->state;
  st.mm = std::move(mm);
  st.view = std::move(view);
  router_config rc;
  rc.kind = c.routing;
  rc.balance_margin = c.balance_margin;
  st.policy = std::make_unique<router_policy>(c.engines.size(), rc);
  for (const auto& at : c.engines) {
    engine_slot slot;
    slot.at = at;
    slot.address = at.host + ":" + std::to_string(at.port);
    st.engines.push_back(std::move(slot));
  }
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (auto it = st.engine_of.find(dm.source); it != st.engine_of.end()) {
      engine_down(self, it->second, dm.reason);
      return;
    }
    if (auto it = st.group_of.find(dm.source); it != st.group_of.end()) {
      const uint64_t gid = it->second;
      abort_on_engines(self, gid, -1);
      drop_group(self, gid);
    }
  });
  self->send(self, reconnect_atom::value);
  return {
      [self](enqueue_atom, new_request& r, const request_actor& requester) {
        auto& st = self->state;
        const uint64_t gid = r.group_id;
        self->monitor(requester);
        st.group_of[requester.address()] = gid;
        group_track g;
        g.choices.resize(static_cast<size_t>(std::max(1, r.params->n)));
        g.req = std::move(r);
        g.requester = requester;
        st.groups.emplace(gid, std::move(g));
        dispatch(self, gid, -1);
      },
      [self](abort_atom, uint64_t gid, int32_t index) {
        auto& st = self->state;
        auto it = st.groups.find(gid);
        if (it == st.groups.end()) return;
        if (index >= 0 && static_cast<size_t>(index) < it->second.choices.size())
          it->second.choices[static_cast<size_t>(index)].done = true;
        abort_on_engines(self, gid, index);
        if (index < 0 || it->second.all_done()) drop_group(self, gid);
      },
      [self](outputs_atom, uint64_t key, output_batch& batch) { on_outputs(self, key, batch); },
      [self](fail_atom, uint64_t key, const std::string& why) {
        auto& st = self->state;
        auto it = st.routes.find(key);
        if (it == st.routes.end()) return;
        const uint64_t gid = it->second.group;
        log::warn("router: engine {} failed a request: {}", st.engines[it->second.engine].address, why);
        drop_key(self, key, true);
        fail_group(self, gid, why);
      },
      [self](load_atom, const engine_stats& s) {
        auto& st = self->state;
        auto it = st.engine_of.find(self->current_sender() ? self->current_sender()->address() : caf::actor_addr{});
        if (it == st.engine_of.end()) return;
        st.policy->report_load(it->second, s.num_running + s.num_waiting, s.kv_blocks_total);
        edit_node(self, it->second, [&s](engine_node& n) { n.stats = s; });
      },
      [self](reconnect_atom) {
        expire_parked(self);
        connect_down_engines(self);
        self->delayed_send(self, reconnect_period, reconnect_atom::value);
      },
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, const cluster_options& c, caf::io::middleman_actor mm,
                          std::shared_ptr<cluster_view> view) {
  return sys.spawn(router, c, std::move(mm), std::move(view));
}

}  // namespace actorserve::actors
