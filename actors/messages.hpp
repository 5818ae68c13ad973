#pragma once
/// Internal: the atoms and message types of the engine's actors (CAF). Include only from
/// actors/*.cpp; the facade (engine.hpp) stays CAF-free.
#include <caf/all.hpp>

#include <vector>

#include "actors/kv_types.hpp"
#include "actors/scheduler_policy.hpp"
#include "gpu/executor.hpp"

namespace actorserve::actors {

using reserve_atom = caf::atom_constant<caf::atom("reserve")>;    ///< scheduler -> block manager
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;    ///< request -> scheduler
using abort_atom = caf::atom_constant<caf::atom("abort")>;        ///< request -> scheduler
using run_atom = caf::atom_constant<caf::atom("run")>;            ///< scheduler -> executor
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>; ///< executor thread -> scheduler
using outputs_atom = caf::atom_constant<caf::atom("outputs")>;    ///< scheduler -> request
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;      ///< engine -> request
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;  ///< request -> itself
using restart_atom = caf::atom_constant<caf::atom("restart")>;    ///< scheduler -> executor (supervision)
using reset_atom = caf::atom_constant<caf::atom("reset")>;        ///< scheduler -> block manager (after restart)
using fail_atom = caf::atom_constant<caf::atom("fail")>;          ///< scheduler -> request (engine gave up)
using hold_atom = caf::atom_constant<caf::atom("hold")>;          ///< engine -> scheduler (a batch arrives)
using unhold_atom = caf::atom_constant<caf::atom("unhold")>;      ///< scheduler -> itself (batch hold timed out)
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;  ///< scheduler -> itself (step deadline)

/// One step's outputs for one request.
struct output_batch {
  std::vector<seq_output> outputs;
};

}  // namespace actorserve::actors

// Local-only messages (never serialized).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_reservation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::kv_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::new_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::actors::output_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorserve::gpu::step_result)
