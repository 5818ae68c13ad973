#pragma once
/// Internal: spawn functions of the engine's actors, returning their typed handles
/// (messages.hpp; include only from actors/*.cpp).
#include <caf/io/middleman_actor.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

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
  const request_upstream* upstream = nullptr;   ///< the scheduler, or a front end's router
  const protocol::tokenizer* tokenizer = nullptr;
  std::shared_ptr<stats_board> stats;
  uint64_t group_id = 0;
  uint64_t seed = 0;
};

/// What a request is checked against before it is admitted.
struct request_limits {
  int32_t vocab_size = 0;
  int64_t max_model_len = 0;
  bool logit_bias = false;                ///< the executor applies logit_bias
  std::string executor_name;              ///< for the error of an unsupported logit_bias
};

/// engine::submit's checks of a request: sampling parameters, token ids, length. The error names
/// the request field.
status check_request(const generation_request& req, const request_limits& lim);

/// How often an engine process reports its load to the front ends connected to it.
inline constexpr std::chrono::milliseconds load_report_period{100};

/// What the gate of an engine process needs from its engine.
struct gate_context {
  scheduler_actor scheduler;
  engine_info info;
  std::function<engine_stats()> stats;
  /// engine::submit's checks (parameters, token ids, length).
  std::function<status(const generation_request&)> admissible;
  /// A group id unique among this engine's requests, local or remote.
  std::function<uint64_t()> next_group;
  /// Counts a request whose front end went away before it finished (requests_cancelled).
  std::function<void()> on_abandoned;
};

/// The actor `actorserve engine` publishes: it answers `hello`, runs submitted requests through
/// one relay each (a request actor that forwards outputs to the submitting front end and ends
/// when that front end goes away) and reports load to every front end every load_report_period.
engine_gate_actor spawn_engine_gate(caf::actor_system& sys, gate_context ctx);

/// What a front end's router shares with its engine facade (cluster_engine.cpp): each engine's
/// state for stats(), engines() and /health, and the first engine's description.
struct cluster_view {
  std::mutex mu;
  std::condition_variable changed;      ///< an engine came up or went down
  std::vector<engine_node> nodes;       ///< in --engines order
  std::optional<engine_info> first;     ///< the first engine that answered hello
};

/// A front end's router: connects to `c.engines` through `mm` (CAF's middleman, or its TLS
/// manager's), and again to every engine that goes down; routes each request with
/// router_policy; forwards outputs to the request actors and remembers the tokens streamed, so a
/// request whose engine goes down is resubmitted to another one with them and continues where
/// it stopped.
router_actor spawn_router(caf::actor_system& sys, const cluster_options& c, caf::io::middleman_actor mm,
                          std::shared_ptr<cluster_view> view);

/// One actor per request: sampling/stop state, detokenizers, deadline, and the consumer's sink.
request_actor spawn_request(caf::actor_system& sys, generation_request req, delta_sink sink,
                            const request_context& ctx);

}  // namespace actorserve::actors
