// The executor actor: hands steps to a gpu::executor (asynchronous) and turns each completion,
// reported on the executor's own thread, into a step_done message. It never waits on a step.
#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"

namespace actorserve::actors {

namespace {

caf::behavior executor_actor(caf::event_based_actor* self, std::shared_ptr<gpu::executor> ex) {
  return {
      [self, ex](run_atom, gpu::step_batch& batch) {
        auto reply_to = caf::actor_cast<caf::actor>(self->current_sender());
        // NOTE: `done` runs on the executor's own thread; a message is the only way back in.
        ex->submit(std::move(batch), [reply_to](gpu::step_result r) {
          caf::anon_send(reply_to, step_done_atom::value, std::move(r));
        });
      },
  };
}

}  // namespace

caf::actor spawn_executor_actor(caf::actor_system& sys, std::shared_ptr<gpu::executor> ex) {
  return sys.spawn(executor_actor, std::move(ex));
}

}  // namespace actorserve::actors
