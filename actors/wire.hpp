#pragma once
/// Internal: what crosses the network between a front end (`actorserve serve --engines`) and an
/// engine process (`actorserve engine`), carried by CAF's BASP: token ids, sampling parameters and
/// seeds in; sampled ids, logprobs and finish reasons out. Text never crosses: tokenization,
/// templates, detokenization and stop strings stay on the front end. Every type here has an
/// `inspect` overload and a CAF type id (the block at the end); `register_wire_types` adds them
/// to an actor system's config. Include only from actors/*.cpp and tests.
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "actors/scheduler_policy.hpp"
#include "config/engine_config.hpp"
#include "config/sampling_params.hpp"
#include "gpu/executor.hpp"

namespace actorserve::actors {

/// The version of these messages. A front end and an engine agree on it or do not talk: it is
/// part of BASP's application identifier (CAF refuses a peer with another one at the handshake)
/// and the engine's `hello` answer repeats it.
inline constexpr int32_t wire_version = 3;
/// BASP's application identifier of this wire version.
inline const std::string wire_app_identifier = "actorserve-engine-wire-3";

/// One step's outputs for one request (the scheduler's `seq_output`s, group id included).
struct output_batch {
  std::vector<seq_output> outputs;
};

/// A request as an engine process receives it. `tokens` is the prompt; a choice resumed after
/// its engine failed brings the tokens it already streamed at the end (`num_generated` of
/// them) and its own `index` and `seed`, so sampling keyed by (seed, generated index)
/// continues exactly where it stopped.
struct wire_request {
  uint64_t key = 0;                  ///< the front end's id of this engine request
  std::vector<int32_t> tokens;
  int32_t num_generated = 0;
  int32_t index = 0;                 ///< choice index of a resumed choice (n == 1)
  sampling_params params;            ///< engine fields only (no stop strings)
  uint64_t seed = 0;
  int32_t priority = 0;
};

/// An engine's answer to `hello`: what the front end needs to route and check requests.
struct engine_info {
  int32_t version = 0;               ///< wire_version of the engine
  std::string model_name;
  int32_t vocab_size = 0;
  int32_t block_size = 0;            ///< prefix-cache block size (routing hashes blocks alike)
  int64_t max_model_len = 0;
  bool logit_bias = false;           ///< its executor applies logit_bias
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_output& x) {
  return f(caf::meta::type_name("seq_output"), x.group_id, x.index, x.has_token, x.token, x.finish, x.num_cached,
           x.num_preemptions, x.num_recomputed, x.scheduled_us, x.first_token_us, x.last_token_us);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, output_batch& x) {
  return f(caf::meta::type_name("output_batch"), x.outputs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_request& x) {
  return f(caf::meta::type_name("wire_request"), x.key, x.tokens, x.num_generated, x.index, x.params, x.seed,
           x.priority);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_info& x) {
  return f(caf::meta::type_name("engine_info"), x.version, x.model_name, x.vocab_size, x.block_size,
           x.max_model_len, x.logit_bias);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.num_running, x.num_waiting, x.kv_blocks_total, x.kv_blocks_used,
           x.kv_blocks_free, x.kv_blocks_cached, x.kv_blocks_shared, x.prefix_cache_queries, x.prefix_cache_hits,
           x.num_preemptions, x.num_recomputed_tokens, x.num_computed_tokens, x.prompt_tokens, x.generation_tokens,
           x.num_steps, x.executor_restarts, x.requests_finished, x.requests_cancelled, x.healthy, x.timed_steps,
           x.timed_tokens, x.step_busy_us, x.step_idle_us, x.decode_steps, x.decode_seqs, x.decode_busy_us,
           x.decode_idle_us, x.untimed_busy_us, x.cascade_seqs, x.iteration_tokens, x.moe_layers, x.num_experts, x.moe_expert_tokens);
}

/// Adds the wire types to an actor system's config (before the system starts).
void register_wire_types(caf::actor_system_config& cfg);
/// Loads CAF's middleman (and its TLS manager with --tls-*), the wire types, BASP's application
/// identifier and heartbeats into a config, before the system starts.
void configure_network(caf::actor_system_config& cfg, const cluster_options& c);

}  // namespace actorserve::actors

namespace actorserve::gpu {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  return f(caf::meta::type_name("token_logprob"), x.token_id, x.logprob);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_token& x) {
  return f(caf::meta::type_name("sampled_token"), x.seq_id, x.token_id, x.logprob, x.top_logprobs);
}

}  // namespace actorserve::gpu

namespace actorserve {

/// The engine's fields of sampling_params; stop strings and skip_special_tokens stay on the
/// front end (they act on text).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_p, x.top_k, x.min_p, x.repetition_penalty,
           x.presence_penalty, x.frequency_penalty, x.num_logprobs, x.max_tokens, x.min_tokens, x.ignore_eos,
           x.stop_token_ids, x.n, x.logit_bias);
}

}  // namespace actorserve

CAF_BEGIN_TYPE_ID_BLOCK(actorserve, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(actorserve, (actorserve::actors::output_batch))
  CAF_ADD_TYPE_ID(actorserve, (actorserve::actors::wire_request))
  CAF_ADD_TYPE_ID(actorserve, (actorserve::actors::engine_info))
  CAF_ADD_TYPE_ID(actorserve, (actorserve::actors::engine_stats))
CAF_END_TYPE_ID_BLOCK(actorserve)
