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

/// One step's outputs for one request.
struct output_batch {
  std::vector<seq_output> outputs;
};

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

/// The scheduler (scheduler_actor.cpp). It monitors each request actor: one that ends is aborted.
using scheduler_actor = caf::typed_actor<
    // request: a new request and the actor to send its outputs to
    caf::reacts_to<enqueue_atom, new_request, request_actor>,
    // request: drop a request's sequences (group id; choice index, or -1 for all)
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

}  // namespace actorserve::actors

// Local-only messages (never serialized).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_reservation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::new_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::output_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_result)
