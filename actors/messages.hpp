#pragma once
/// Internal: the engine's actors as CAF typed actor handles. Each handle lists the messages its
/// actor accepts, with who sends them, so a message to the wrong actor, or with the wrong
/// arguments, does not compile. Include only from actors/*.cpp; the facade (engine.hpp) stays
/// CAF-free.
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/kv_types.hpp"
#include "actors/scheduler_policy.hpp"
#include "actors/wire.hpp"
#include "gpu/executor.hpp"

namespace actorserve::actors {

using reserve_atom = caf::atom_constant<caf::atom("reserve")>;
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using outputs_atom = caf::atom_constant<caf::atom("outputs")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using unhold_atom = caf::atom_constant<caf::atom("unhold")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;

/// One actor per request (request_actor.cpp).
using request_actor = caf::typed_actor<
    // scheduler: one step's outputs for this request's sequences
    caf::reacts_to<outputs_atom, output_batch>,
    // scheduler: the engine gave up; every choice ends with this error
    caf::reacts_to<fail_atom, std::string>,
    // engine: engine::cancel, or the shutdown's grace ran out
    caf::reacts_to<cancel_atom>,
    // itself: the request's deadline passed
    caf::reacts_to<deadline_atom>>;

/// What a request actor sends its requests to: the scheduler in this process, or a front end's
/// router (router_actor.cpp) that forwards them to engine processes. It monitors the request
/// actor: one that ends is aborted.
using request_upstream = caf::typed_actor<
    // request: a new request and the actor to send its outputs to
    caf::reacts_to<enqueue_atom, new_request, request_actor>,
    // request: drop a request's sequences (group id; choice index, or -1 for all)
    caf::reacts_to<abort_atom, uint64_t, int32_t>>;

/// The scheduler (scheduler_actor.cpp), a request_upstream.
using scheduler_actor = caf::typed_actor<
    caf::reacts_to<enqueue_atom, new_request, request_actor>,
    caf::reacts_to<abort_atom, uint64_t, int32_t>,
    // engine: n requests of a submitted batch are on their way; plan nothing new until they arrive
    caf::reacts_to<hold_atom, uint32_t>,
    // itself: the hold with this tag timed out
    caf::reacts_to<unhold_atom, uint64_t>,
    // the executor's thread: a step completed (or failed)
    caf::reacts_to<step_done_atom, gpu::step_result>,
    // itself: look at the oldest step in flight (supervision)
    caf::reacts_to<watchdog_atom>>;

/// The executor actor (executor_actor.cpp), detached.
using executor_actor = caf::typed_actor<
    // scheduler: run a step; its result goes to the given scheduler as step_done
    caf::reacts_to<run_atom, gpu::step_batch, scheduler_actor>,
    // scheduler (supervision): replace the executor (true: the old one is wedged); answers the
    // fresh executor's number of KV blocks and "", or 0 and why the restart failed
    caf::replies_to<restart_atom, bool>::with<int32_t, std::string>>;

/// The KV block manager (kv_block_manager.cpp).
using kv_block_manager_actor = caf::typed_actor<
    // scheduler: one step's reservation, answered by a grant or a shortfall
    caf::replies_to<reserve_atom, kv_reservation>::with<kv_answer>,
    // scheduler (supervision): a fresh pool of this many blocks after an executor restart
    caf::reacts_to<reset_atom, int32_t>>;

// -- Between processes (wire.hpp's types) -----------------------------------------------------

/// A front end's router as engine processes see it: where a request's outputs and an engine's
/// load reports go.
using engine_client_actor = caf::typed_actor<
    // engine (relay): one step's outputs of the request with this key
    caf::reacts_to<outputs_atom, uint64_t, output_batch>,
    // engine: the request with this key failed (refused, or the engine gave up)
    caf::reacts_to<fail_atom, uint64_t, std::string>,
    // engine (gate): its stats, every load_report_period
    caf::reacts_to<load_atom, engine_stats>>;

/// An engine process's published actor (engine_gate.cpp). The sender of `hello` receives load
/// reports; the sender of `submit` receives the request's outputs.
using engine_gate_actor = caf::typed_actor<
    // front end: the wire version it speaks; answered with the engine's description
    caf::replies_to<hello_atom, int32_t>::with<engine_info>,
    // front end: run a request; outputs go to the sender, keyed by the request's key
    caf::reacts_to<submit_atom, wire_request>,
    // front end: drop the sender's request `key` (choice index, or -1 for all)
    caf::reacts_to<abort_atom, uint64_t, int32_t>,
    // itself: send the load reports
    caf::reacts_to<tick_atom>>;

/// The engine side of one remote request (engine_gate.cpp): a request actor to the scheduler
/// that forwards outputs over the network; `abort(index)` drops one choice.
using relay_actor = request_actor::extend<caf::reacts_to<abort_atom, int32_t>>;

/// A front end's router (router_actor.cpp): the request actors' upstream and the engines' client.
using router_actor = engine_client_actor::extend<
    caf::reacts_to<enqueue_atom, new_request, request_actor>,
    caf::reacts_to<abort_atom, uint64_t, int32_t>,
    // itself: connect to the engines that are down
    caf::reacts_to<reconnect_atom>>;

}  // namespace actorserve::actors

// Local-only messages (never serialized).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_reservation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::new_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_result)
