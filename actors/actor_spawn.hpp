#pragma once
/// Internal: spawn functions of the engine's actors, returning their typed handles
/// (messages.hpp; include only from actors/*.cpp).
#include <functional>
#include <memory>

#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "actors/scheduler_policy.hpp"
#include "actors/stats_board.hpp"
#include "actors/supervision_policy.hpp"
#include "gpu/executor.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::actors {

/// The KV block manager: owns the block pool, answers each step's reservation in one message.
kv_block_manager_actor spawn_kv_block_manager(caf::actor_system& sys, int32_t num_blocks, int32_t block_size,
                                              bool enable_prefix_caching, std::shared_ptr<stats_board> stats);

/// Makes a fresh executor (the same one engine::start made) for a restart.
using executor_factory = std::function<result<std::unique_ptr<gpu::executor>>()>;

/// The executor actor: hands steps to `ex` (asynchronous) and turns each completion into a
/// step_done message to the step's scheduler. Never waits on a step. On `restart` it discards
/// `ex` and makes a new one with `factory` (it runs detached: that blocks).
executor_actor spawn_executor_actor(caf::actor_system& sys, std::shared_ptr<gpu::executor> ex,
                                    executor_factory factory);

/// The scheduler: queues, batches, preemption; routes each step's outputs to request actors.
/// It supervises the executor (supervision_policy): a failed or overdue step restarts it and
/// requeues every running sequence for recompute; too many failures within the window fail every
/// request.
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_config cfg, kv_block_manager_actor block_manager,
                                executor_actor executor, std::shared_ptr<stats_board> stats, supervision_config sup);

/// Everything a request actor needs besides the request itself.
struct request_context {
  const scheduler_actor* scheduler = nullptr;
  const protocol::tokenizer* tokenizer = nullptr;
  std::shared_ptr<stats_board> stats;
  uint64_t group_id = 0;
  uint64_t seed = 0;
};

/// One actor per request: sampling/stop state, detokenizers, deadline, and the consumer's sink.
request_actor spawn_request(caf::actor_system& sys, generation_request req, delta_sink sink,
                            const request_context& ctx);

}  // namespace actorserve::actors
