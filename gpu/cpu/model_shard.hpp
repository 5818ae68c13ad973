#pragma once
/// One tensor-parallel shard of the CPU forward pass (--tensor-parallel-size N with --device cpu):
/// a cpu_model over shard r's weight slices (shard_plan, shard_weights_f32) with its own KV cache
/// of its KV heads (DeepSeek-V2: a copy of the latent cache), and its copy of the residual
/// stream. Per layer it computes its partial attention output, all-reduces it with the other
/// shards and adds the sum to its residual; the same for the MLP or experts (a slice of every
/// expert, or under expert parallelism the whole experts of its range over the tokens routed to
/// them: either way a partial sum, one all-reduce per layer). The embedding is a
/// vocabulary-parallel partial summed the same way, and the logits are each shard's vocabulary
/// slice, gathered so that every shard holds the whole rows. Those exchanges (host_collective)
/// are the only data the shards share, as NCCL collectives are between GPUs. Over one shard
/// (plan of size 1, no collective) this is the plain single-device forward pass.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpu/cpu/cpu_model.hpp"
#include "gpu/cpu/kv_cache.hpp"
#include "gpu/cpu/step_tokens.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"
#include "gpu/parallel/host_collective.hpp"

namespace actorserve::gpu::cpu {

class model_shard {
 public:
  /// Cuts shard `rank`'s weights from `views` and gives it a cache of `num_blocks` blocks of
  /// `block_size` tokens (block ids are shared: block b of every shard holds the same tokens).
  /// `collective` joins the plan's other shards (null for a plan of one shard). Throws
  /// std::bad_alloc when the cache does not fit. `quantize_fp8` (--quantization fp8) rounds the
  /// linear weights to FP8 E4M3 per output channel; it needs the whole weights (one shard).
  model_shard(const model_weight_views& views, const shard_plan& plan, int64_t rank,
              std::shared_ptr<host_collective> collective, int64_t num_blocks, int64_t block_size, mla_form form,
              bool quantize_fp8 = false);

  /// Bytes one KV block takes over all layers of shard `rank` of `plan`.
  static size_t bytes_per_block(const shard_plan& plan, int64_t rank, int64_t block_size);

  /// The whole model's config (not the shard's).
  const model_config& config() const { return whole_; }
  const kv_cache_layout& cache_layout() const { return cache_.layout(); }

  /// Computes the new tokens of every sequence with the other shards (each calls it with the same
  /// `seqs`), writing their K/V into this shard's cache; appends to `logits` one whole row of
  /// vocab_size floats per sequence with want_logits, in batch order. `cascade`: the step's groups
  /// of decodes sharing prefix blocks (cpu_model::begin_step). Throws collective_aborted when
  /// another shard failed.
  void forward(thread_pool& pool, std::span<const forward_seq> seqs, const cascade_plan& cascade,
               std::vector<float>& logits);
  /// --kv-cache-dtype fp8: K/V stored rounded to E4M3 with these per-layer scales.
  void set_fp8_kv_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  void copy_block(int64_t src, int64_t dst) { cache_.copy_block(src, dst); }
  /// The decoder layers with a sparse FFN, and the tokens the last forward routed to each of
  /// their experts ([layer][expert]); every shard routes alike (the router is replicated, under
  /// expert parallelism too), so each shard's count is the model's, each routed token once.
  const std::vector<int32_t>& moe_layers() const { return model_.moe_layers(); }
  const std::vector<int64_t>& expert_tokens() const { return model_.expert_tokens(); }

 private:
  /// Sums `partial_` (n floats) over the shards.
  void all_reduce(size_t n);

  model_config whole_;
  int rank_ = 0;
  shard_slice vocab_;                            ///< token ids whose logits this shard computes
  std::shared_ptr<host_collective> collective_;  ///< null over one shard
  cpu_model model_;
  paged_kv_cache cache_;
  std::vector<float> x_;         ///< [T][hidden] this shard's copy of the residual stream
  std::vector<float> partial_;   ///< [T][hidden] a stage's partial output, then the all-reduced sum
  std::vector<float> logits_;    ///< [rows][vocab slice]
};

}  // namespace actorserve::gpu::cpu
