#pragma once
/// The host half of a CUDA step: turns a step_batch into a staged_step (token ids, positions, KV
/// slots, block tables, attention work lists, sampler parameters, penalties, masks, the sampled
/// rows, the grammar masks to wait for), validating it against the executor's limits. No CUDA
/// calls: unit-tested without a GPU (tests/cuda/step_builder_test.cpp). The launcher
/// (cuda_step.cpp) copies the staged arrays into pinned memory, then to the device, and enqueues
/// the forward pass.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "config/error.hpp"
#include "gpu/attention/cascade_plan.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"
#include "gpu/executor.hpp"

namespace actorserve::gpu::cuda {

/// Decode batch sizes that get a CUDA graph: 1, 2, 4, 8, 16, 24, 32, ... 256.
int decode_bucket(int batch);

/// What a step may hold: the executor's limits and the capacities of its staging areas.
struct step_limits {
  int max_rows = 0;                     ///< --max-num-seqs
  int max_tokens = 0;                   ///< --max-num-batched-tokens
  int block_size = 16;
  int vocab_size = 0;
  int max_model_len = 0;
  int64_t num_blocks = 0;               ///< blocks of the KV pool
  size_t block_table_capacity = 0;      ///< block ids of all sequences of a step
  size_t mask_capacity = 0;             ///< masked ids of all sequences of a step
  size_t item_capacity = 0;             ///< attention work items of a step
  size_t last_item_capacity = 0;        ///< work items of the last layer's sampled-rows attention
  size_t prefix_row_capacity = 0;       ///< cascade prefix items and member rows of a step
  /// Cascade attention: decodes sharing prefix blocks get a shared-prefix pass where
  /// gpu::plan_cascade finds it pays (and the backend takes cascade groups).
  bool cascade = false;
  gpu::cascade_costs cascade_costs;
  bool enforce_eager = false;           ///< no decode graphs
  /// The last layer runs on every row (cuda_tuning::last_layer_all_rows, and latent attention,
  /// which has no sampled-rows path).
  bool last_layer_all_rows = false;
  /// Latent attention (DeepSeek-V2): a sequence of more than one new token is a prefill chunk in
  /// the up-projected form (staged_step::up_projected), the others decode in the absorbed form.
  bool latent_attention = false;
  std::vector<int32_t> eos_token_ids;   ///< masked with the stop ids while suppress_eos
};

/// One step, staged on the host: every array the forward pass reads, in the order the device
/// buffers hold them. Reused from step to step (its vectors keep their capacity).
struct staged_step {
  int num_seqs = 0;
  int num_tokens = 0;                   ///< new tokens of the batch
  int rows = 0;                         ///< rows through the layers: num_tokens, or the graph bucket
  int bucket = 0;                       ///< decode graph bucket (0: eager)
  bool all_decode = false;              ///< every sequence brings one token
  /// The last layer runs past its K/V writes on the sampled rows only (last_seqs, last_plan).
  bool sampled_only = false;
  std::vector<int32_t> ids, positions, slots;  ///< per row; padding rows: 0, 0, -1
  /// Per row: index of its sequence in seqs; padding rows and the rows of up_projected: -1.
  std::vector<int32_t> token_seqs;
  /// Latent attention: the sequences (copies of seqs' entries) whose chunk is computed in the
  /// up-projected form, those of more than one new token.
  std::vector<attn_seq> up_projected;
  /// Latent attention: the absorbed form runs on rows [0, absorbed_rows), up to the last row not
  /// in up_projected (the scheduler lists running sequences first, so a step's new prompts are
  /// usually all after its decode rows); rows otherwise.
  int absorbed_rows = 0;
  std::vector<int32_t> q32;             ///< per row: whether rope writes its fp32 q
  std::vector<int32_t> block_tables;    ///< every sequence's blocks, attn_seq::bt_offset into them
  std::vector<attn_seq> seqs;
  attention_plan plan;
  bool cascade = false;                 ///< the plan has cascade prefix pieces
  std::vector<attn_seq> last_seqs;      ///< one query per sampled sequence (sampled_only)
  attention_plan last_plan;
  std::vector<sample_seq> sample_seqs;  ///< one per sampler row
  std::vector<int32_t> sample_rows;     ///< the layer row each sampler row reads
  std::vector<penalty_token> penalties;
  std::vector<int32_t> masks;
  /// Grammar masks of the sampled sequences that have one (sample_seq::grammar_row indexes
  /// them); they may be filled after the step is submitted (gpu/sampling/token_mask.hpp).
  std::vector<std::shared_ptr<token_mask>> grammar;
  /// (row, sampler row of the previous step) for each decode token that is gpu::previous_token.
  std::vector<int32_t> previous;
  std::vector<int32_t> copy_pairs;      ///< block copies as (src, dst) pairs
  /// The sampled sequences in batch order: id, sampler row, top logprobs wanted.
  std::vector<uint64_t> seq_ids;
  std::vector<int32_t> out_rows, num_top;
};

/// Stages steps for one executor: its limits and its attention backend's planner.
class step_builder {
 public:
  step_builder(step_limits limits, const attention_backend& attention);

  /// Validates `b` and stages it into `out` (an invalid_argument error names what is wrong).
  /// `previous_rows`: (sequence, sampler row) of each sequence the step launched before this one
  /// sampled, sorted by sequence: what gpu::previous_token resolves to.
  status build(const step_batch& b, std::span<const std::pair<uint64_t, int32_t>> previous_rows,
               staged_step& out) const;

  const step_limits& limits() const { return limits_; }

 private:
  /// Sampler parameters, penalties and masks of every sampling sequence (and of every sequence
  /// in a graph bucket).
  void stage_sampling(const step_batch& b, staged_step& out) const;
  /// Ids, positions, KV slots, block tables and sampled rows of every sequence.
  status stage_tokens(const step_batch& b, std::span<const std::pair<uint64_t, int32_t>> previous_rows,
                      staged_step& out) const;
  /// The step's cascade groups (none when limits().cascade is off).
  cascade_plan plan_cascade_step(const step_batch& b) const;
  /// The attention work lists: the step's and, when sampled_only, the last layer's.
  status stage_attention(const step_batch& b, staged_step& out) const;

  step_limits limits_;
  const attention_backend* attention_;
};

}  // namespace actorserve::gpu::cuda
