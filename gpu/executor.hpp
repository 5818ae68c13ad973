#pragma once
/// The one interface both executors (cpu/, cuda/) implement; the engine cannot tell them apart.
///
/// A step is a batch of sequences, each bringing some new tokens (a whole prompt, a prefill chunk
/// appended to cached tokens, or one decode token) and its block table. The executor writes their
/// K/V into the paged cache, and for each sequence that asks, samples the next token from the
/// logits at its last new position (on the device for CUDA: only ids and requested logprobs come
/// back). Steps run asynchronously: `submit` returns at once and `done` is called from the
/// executor's own thread (never a caller's) when the step is complete.
///
/// Two steps may be in flight: the engine plans step N+1 while N runs. A sequence that samples
/// in N and decodes in N+1 brings `previous_token` as its one new token in N+1; the executor
/// resolves it to the token it sampled for that sequence in the step submitted just before
/// (CUDA: on the device from the sampler's output buffer; CPU: from its last result).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/error.hpp"
#include "config/sampling_params.hpp"
#include "gpu/sampling/token_mask.hpp"

namespace actorserve::gpu {

/// A new-token placeholder: the token this sequence sampled in the previous step (see above).
inline constexpr int32_t previous_token = -1;

/// One sequence's share of a step.
struct step_sequence {
  uint64_t seq_id = 0;
  int32_t num_computed = 0;            ///< tokens of this sequence already in the KV cache
  std::vector<int32_t> new_tokens;     ///< tokens to compute now, at positions num_computed...
                                       ///< (or {previous_token}: one decode token, see above)
  std::vector<int32_t> block_table;    ///< block ids covering [0, num_computed + new_tokens.size())
  bool sample = false;                 ///< sample a token after the last new token
  /// Sampling state; read only when `sample`.
  sampling_params params;
  uint64_t seed = 0;                   ///< the request's seed (engine assigns one if absent)
  int32_t num_generated = 0;           ///< tokens generated so far (index of the token sampled now)
  /// Prompt + generated tokens so far; only set when params.uses_penalties().
  std::shared_ptr<const std::vector<int32_t>> history;
  int32_t prompt_len = 0;              ///< prefix of `history` that is prompt
  bool suppress_eos = false;           ///< min_tokens not reached: EOS and stop ids masked
  /// Grammar-constrained decoding: only these tokens may be sampled (null: any). May be filled
  /// after the step is submitted; the sampler waits for it (token_mask.hpp).
  std::shared_ptr<token_mask> allowed_tokens;
};

struct step_batch {
  uint64_t step_id = 0;
  std::vector<step_sequence> seqs;
  /// Copy-on-write: whole-block copies (src, dst) done before the step's forward pass.
  std::vector<std::pair<int32_t, int32_t>> block_copies;
};

struct token_logprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

/// The token sampled for one sequence of a step.
struct sampled_token {
  uint64_t seq_id = 0;
  int32_t token_id = 0;
  float logprob = 0.0f;                     ///< log-softmax after penalties and EOS masking, before temperature
  std::vector<token_logprob> top_logprobs;  ///< when params.num_logprobs > 0, best first
};

struct step_result {
  uint64_t step_id = 0;
  status outcome;                        ///< an error here fails the step (supervisor restarts)
  std::vector<sampled_token> tokens;     ///< one per sequence that asked to sample, batch order
  double device_ms = 0.0;                ///< time the step took on the executor (busy time)
  /// How long the device sat idle between the end of the previous step and the start of this
  /// one (CUDA events on the stream; CPU: the worker thread's clock); < 0 for the first step.
  double idle_before_ms = -1.0;
  /// Tokens the step routed to each expert, [sparse layer][expert] flattened in the order of
  /// executor_info::moe_layers (a token counts once per expert of its top k); empty for a dense
  /// model or an executor that does not count.
  std::vector<int64_t> expert_tokens;
  /// Sequences whose attention over a prefix shared with others took one pass per group
  /// (cascade attention, docs/attention.md); 0 when none did.
  int32_t cascade_seqs = 0;
};

/// What the engine needs to know about the loaded model and cache.
struct executor_info {
  std::string name;                      ///< "cpu" or "cuda"
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  int32_t block_size = 0;
  int32_t num_blocks = 0;                ///< KV blocks in the pool
  /// Host memory the KV pool reaches once every block was used (its pages are touched as
  /// blocks are first written); 0 when the pool lives in device memory.
  int64_t host_kv_cache_bytes = 0;
  std::vector<int32_t> eos_token_ids;
  /// Mixture of experts: the decoder layers with a sparse FFN and the routed experts in each
  /// (step_result::expert_tokens); empty and 0 for a dense model.
  std::vector<int32_t> moe_layers;
  int32_t num_experts = 0;
};

class executor {
 public:
  using done_fn = std::function<void(step_result)>;
  virtual ~executor() = default;
  virtual const executor_info& info() const = 0;
  /// Enqueues a step; `done` runs later on the executor's thread. Steps complete in order.
  virtual void submit(step_batch batch, done_fn done) = 0;
  /// Whether its sampler adds params.logit_bias to the logits; the engine refuses requests with
  /// a logit_bias on an executor without it (never dropped silently).
  virtual bool supports_logit_bias() const { return false; }
  /// Whether its sampler applies step_sequence::allowed_tokens; the engine refuses
  /// grammar-constrained requests on an executor without it.
  virtual bool supports_token_masks() const { return false; }
};

}  // namespace actorserve::gpu
