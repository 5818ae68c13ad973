#pragma once
/// The engine facade: what the server and the offline generator see of the actor system.
/// Behind it: one request actor per request, the scheduler, the KV block manager and the executor
/// actor (see docs/architecture.md). No CAF types leak through this header.
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "config/sampling_params.hpp"
#include "grammar/constraint.hpp"

namespace actorserve::protocol { class tokenizer; }

namespace actorserve::gpu { class executor; }

namespace actorserve::actors {

enum class finish_reason { stop, length, cancelled, error };
const char* to_string(finish_reason r);

struct generation_request {
  std::string request_id;                 ///< for logs; unique per request
  std::vector<int32_t> prompt_ids;
  sampling_params params;                 ///< includes n, stop strings, logprobs, max_tokens
  int32_t priority = 0;                   ///< lower value is served first (vLLM convention)
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Grammar-constrained decoding (engine::compile_grammar): every choice's output follows
  /// this grammar; null: free text. `grammar_field` names the request field it came from.
  std::shared_ptr<const grammar::compiled_grammar> grammar;
  std::string grammar_field;
};

struct logprob_entry {
  int32_t token_id = 0;
  std::string token;                      ///< the token's text (as OpenAI's logprobs show it)
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  ///< top alternatives, best first
};

struct usage_counts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;          ///< over all n choices
  int64_t cached_prompt_tokens = 0;
  int64_t num_preemptions = 0;            ///< times a choice was preempted (most of any choice)
  int64_t num_recomputed_tokens = 0;      ///< tokens computed again after preemption (most of any choice)
};

/// Where an engine request spent its time, measured by the scheduler on its own clock, as vLLM
/// splits a request (each unset when the request never reached its start): queue (queued to
/// first scheduled; a preempted and rescheduled request keeps its first scheduling), prefill
/// (first scheduled to first token, preemptions included), decode (first token to last) and
/// inference (first scheduled to last token). Over n choices: the first scheduling and first
/// token of any choice, the last token of all.
struct request_times {
  std::optional<double> queue_s, prefill_s, decode_s, inference_s;
};

/// One streamed update for one choice (index < n) of a request. Text is already safe UTF-8
/// with stop strings removed; the last delta of a choice carries `finish`.
struct delta {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<logprob_entry> logprobs;    ///< one per token in token_ids when logprobs asked
  std::optional<finish_reason> finish;
  std::optional<error> failure;           ///< set with finish == error
  /// Set on the very last delta of the whole request (all choices finished).
  std::optional<usage_counts> usage;
  /// Set with `usage`: the scheduler's times of the request.
  std::optional<request_times> times;
};

/// Called from actor threads, in order per request: a consumer must hand the delta to its own
/// thread or strand and return quickly. Returning false asks the engine to cancel the request
/// (e.g. the consumer's queue is full).
using delta_sink = std::function<bool(delta)>;

/// Upper bounds of the buckets of tokens computed per engine step (engine_stats::iteration_tokens),
/// vLLM's bounds of `vllm:iteration_tokens_total`.
inline constexpr int32_t iteration_tokens_bounds[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
inline constexpr size_t num_iteration_tokens_buckets = std::size(iteration_tokens_bounds) + 1;  ///< with +Inf

/// A snapshot of the engine's gauges and totals. NOTE: a field has one name from the scheduler
/// (scheduler_counters) through the stats board to /metrics, where its series is
/// `actorserve:<name>` (a gauge) or `actorserve:<name>_total` (a counter).
struct engine_stats {
  int64_t num_running = 0, num_waiting = 0;   ///< sequences (series num_requests_running/waiting)
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
  int64_t kv_blocks_shared = 0;           ///< blocks referenced by more than one sequence
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;   ///< in tokens
  int64_t num_preemptions = 0, num_recomputed_tokens = 0;
  int64_t num_computed_tokens = 0;        ///< tokens run through the model (prefix hits excluded)
  int64_t prompt_tokens = 0, generation_tokens = 0;
  int64_t num_steps = 0, executor_restarts = 0;
  int64_t requests_finished = 0, requests_cancelled = 0;
  bool healthy = false;                   ///< engine loop alive and making progress
  /// Executor busy/idle time of steps run back to back (the engine had work throughout; the
  /// idle time is the gap between the previous step's end and this step's start on the device).
  /// GPU idle % = idle / (busy + idle). `decode_*` counts only steps where every sequence
  /// decodes one token; decode_seqs sums their batch sizes. timed_tokens: the new tokens of the
  /// timed steps.
  int64_t timed_steps = 0, timed_tokens = 0, step_busy_us = 0, step_idle_us = 0;
  int64_t decode_steps = 0, decode_seqs = 0, decode_busy_us = 0, decode_idle_us = 0;
  /// Executor busy time of the other steps (num_steps - timed_steps of them: the first of a burst
  /// of work, whose device idle time before it is the engine's waiting for work), so that busy
  /// time over every step is step_busy_us + untimed_busy_us.
  int64_t untimed_busy_us = 0;
  /// Sequences whose attention over a prefix shared with others took one pass per group
  /// (cascade attention), summed over the steps (gpu::step_result::cascade_seqs).
  int64_t cascade_seqs = 0;
  /// Steps by tokens computed (prefix hits excluded), one count per bucket of
  /// iteration_tokens_bounds (not cumulative; the last is +Inf). Their sum is
  /// num_computed_tokens, their count num_steps.
  std::vector<int64_t> iteration_tokens = std::vector<int64_t>(num_iteration_tokens_buckets, 0);
  /// Mixture of experts (empty for a dense model): the decoder layers with a sparse FFN, the
  /// routed experts in each, and the tokens routed to each expert since start,
  /// [moe_layers][expert] flattened (a token counts once per expert of its top k).
  std::vector<int32_t> moe_layers;
  int32_t num_experts = 0;
  std::vector<int64_t> moe_expert_tokens;
};

/// One engine process as a front end of remote engines sees it (engine::engines()).
struct engine_node {
  std::string address;                    ///< HOST:PORT as given to --engines
  bool up = false;                        ///< connected, and its wire version matches
  engine_stats stats;                     ///< its last load report
  int64_t requests_routed = 0;            ///< requests this front end sent it
  int64_t requests_resubmitted = 0;       ///< requests (or choices) moved from it when it went down
};

class engine {
 public:
  /// Loads the model and tokenizer, starts the actor system and executor. Errors name the file
  /// or flag. With cfg.cluster.listen, the engine can be published (publish()).
  static result<std::unique_ptr<engine>> start(const engine_config& cfg);
  /// The same, with its executors (the first and each restart's) made by `make_executor` instead
  /// of gpu::make_executor(cfg): tests that put a fault into one shard of a group.
  static result<std::unique_ptr<engine>> start(
      const engine_config& cfg, std::function<result<std::unique_ptr<gpu::executor>>()> make_executor);
  /// A front end of the engine processes in cfg.cluster.engines: the tokenizer comes from
  /// cfg.model.model_dir, requests are routed by cfg.cluster.routing and move to another engine
  /// when theirs goes down. Waits up to --engine-connect-timeout for a first engine.
  static result<std::unique_ptr<engine>> connect(const engine_config& cfg);
  virtual ~engine() = default;

  /// Admits a request (non-blocking). An invalid request is answered with an error at once.
  virtual status submit(generation_request req, delta_sink sink) = 0;
  /// Admits many requests as one arrival, as vLLM's LLM.generate adds every prompt before it
  /// steps: the scheduler plans no new step until all of them reached it (or a second passed),
  /// so an idle engine's first step carries as many of them as its limits allow. One status per
  /// request, in order; the invalid ones are answered as submit answers them.
  virtual std::vector<status> submit_batch(std::vector<std::pair<generation_request, delta_sink>> batch) {
    std::vector<status> out;
    out.reserve(batch.size());
    for (auto& [req, sink] : batch) out.push_back(submit(std::move(req), std::move(sink)));
    return out;
  }
  /// Compiles an output constraint (JSON schema, regex, choice, tool calls) for this model's
  /// vocabulary, cached by spec; errors name spec.field (a keyword it cannot honour, an executor
  /// whose sampler applies no masks). Runs on the caller's thread: call it off the I/O threads
  /// (a new schema takes milliseconds, up to seconds at a large vocabulary).
  virtual result<std::shared_ptr<const grammar::compiled_grammar>> compile_grammar(const grammar::constraint_spec& spec) {
    return make_error(error_code::unsupported, spec.field + ": grammar-constrained decoding is not available here");
  }
  /// Cancels a request by id; frees its KV blocks within one step. Unknown ids are ignored.
  virtual void cancel(const std::string& request_id) = 0;
  virtual engine_stats stats() const = 0;
  virtual const protocol::tokenizer& tokenizer() const = 0;
  virtual const std::string& model_name() const = 0;
  virtual int64_t max_model_len() const = 0;
  /// Stops admitting, cancels what runs after `grace`, stops the actors. Idempotent.
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
  /// Publishes this engine for front ends at cfg.cluster.listen (TLS with --tls-*); returns the
  /// bound port. Only an engine started with --listen can.
  virtual result<uint16_t> publish() {
    return make_error(error_code::unsupported, "--listen: this engine cannot be published");
  }
  /// The engine processes behind a front end (empty for an engine in this process).
  virtual std::vector<engine_node> engines() const { return {}; }
};

}  // namespace actorserve::actors
