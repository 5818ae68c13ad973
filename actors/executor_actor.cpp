// The executor actor: hands steps to a gpu::executor (asynchronous) and turns each completion,
// reported on the executor's own thread, into a step_done message. It never waits on a step's
// completion; a CUDA step with grammar masks planned ahead holds its submit until the scheduler
// fills them from the previous step's result (or abandons them), which arrives independently.
// Under supervision it also replaces its executor on `restart` (it runs detached, on its own
// thread, because loading a model blocks).
#include <fmt/format.h>

#include <thread>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "config/log.hpp"

namespace actorserve::actors {

namespace {

struct executor_state {
  std::shared_ptr<gpu::executor> ex;
  executor_factory factory;
  static inline const char* name = "executor";
};

using executor_self = executor_actor::stateful_pointer<executor_state>;

/// Drops the old executor. A wedged one (a step never returned) cannot be joined: its
/// destruction is handed to a detached thread that may block forever on it.
void discard(std::shared_ptr<gpu::executor> old, bool wedged) {
  if (!old) return;
  if (!wedged) {
    old.reset();
    return;
  }
  std::thread([old = std::move(old)]() mutable { old.reset(); }).detach();
}

executor_actor::behavior_type executor_behavior(executor_self self, std::shared_ptr<gpu::executor> ex,
                                                executor_factory factory) {
  self->state.ex = std::move(ex);
  self->state.factory = std::move(factory);
  return {
      [self](run_atom, gpu::step_batch& batch, const scheduler_actor& reply_to) {
        if (!self->state.ex) {
          gpu::step_result r;
          r.step_id = batch.step_id;
          r.outcome = make_error(error_code::unavailable, "no executor");
          caf::anon_send(reply_to, step_done_atom::value, std::move(r));
          return;
        }
        // NOTE: `done` runs on the executor's own thread; a message is the only way back in.
        self->state.ex->submit(std::move(batch), [reply_to](gpu::step_result r) {
          caf::anon_send(reply_to, step_done_atom::value, std::move(r));
        });
      },
      // Replaces the executor (device state included): the old one goes first so that its
      // memory is free for the new one.
      [self](restart_atom, bool wedged) -> caf::result<int32_t, std::string> {
        auto& st = self->state;
        discard(std::move(st.ex), wedged);
        if (!st.factory) return {int32_t{0}, std::string("no executor factory")};
        auto fresh = st.factory();
        if (!fresh) return {int32_t{0}, fresh.err().message};
        st.ex = std::shared_ptr<gpu::executor>(std::move(fresh.value()));
        return {st.ex->info().num_blocks, std::string()};
      },
  };
}

}  // namespace

executor_actor spawn_executor_actor(caf::actor_system& sys, std::shared_ptr<gpu::executor> ex,
                                    executor_factory factory) {
  return sys.spawn<caf::detached>(executor_behavior, std::move(ex), std::move(factory));
}

}  // namespace actorserve::actors
