#pragma once
/// Tensor parallelism on the CPU (--tensor-parallel-size N with --device cpu): N shards in one
/// process, each a cpu_model over its own weight slices (shard_plan, shard_weights_f32) with its
/// own KV cache of its KV heads (DeepSeek-V2: a copy of the latent cache). Per layer every shard
/// computes its partial attention output, the partials are all-reduced and added to each shard's
/// copy of the residual stream, and the same for the MLP or experts (a slice of every expert, or
/// under expert parallelism the whole experts of the shard's range over the tokens routed to
/// them: either way a partial sum, one all-reduce per layer); the embedding is a
/// vocabulary-parallel partial summed the same way, and the logits are each shard's vocabulary
/// slice, gathered. Those exchanges (shard_exchange) are the only data the shards share, as NCCL
/// collectives would be between GPUs. The shards run one after another, each over the whole
/// thread pool; over one shard this is the plain single-device forward pass.
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

namespace actorserve::gpu::cpu {

class tensor_parallel_model {
 public:
  /// Cuts each shard's weights from `views` and gives it a cache of `num_blocks` blocks of
  /// `block_size` tokens (block ids are shared: block b of every shard holds the same tokens).
  /// Throws std::bad_alloc when a cache does not fit. `quantize_fp8` (--quantization fp8) rounds
  /// the linear weights to FP8 E4M3 per output channel; it needs the whole weights (one shard).
  tensor_parallel_model(const model_weight_views& views, shard_plan plan, int64_t num_blocks, int64_t block_size,
                        mla_form form, bool quantize_fp8 = false);

  /// Bytes one KV block takes over all layers and all shards of `plan`.
  static size_t bytes_per_block(const shard_plan& plan, int64_t block_size);

  const model_config& config() const { return plan_.config(); }
  const shard_plan& plan() const { return plan_; }
  /// The KV cache layout of shard `s`.
  const kv_cache_layout& cache_layout(int64_t s) const { return shards_[static_cast<size_t>(s)]->cache.layout(); }

  /// Computes the new tokens of every sequence, writing their K/V into each shard's cache;
  /// appends to `logits` one row of vocab_size floats per sequence with want_logits, in batch order.
  /// `cascade`: the step's groups of decodes sharing prefix blocks (cpu_model::begin_step).
  void forward(thread_pool& pool, std::span<const forward_seq> seqs, const cascade_plan& cascade,
               std::vector<float>& logits);
  /// --kv-cache-dtype fp8: every shard stores K/V rounded to E4M3 with these per-layer scales.
  void set_fp8_kv_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  /// Copies block `src` to `dst` in every shard's cache.
  void copy_block(int64_t src, int64_t dst);
  /// The decoder layers with a sparse FFN, and the tokens the last forward routed to each of
  /// their experts ([layer][expert]); every shard routes alike (the router is replicated, under
  /// expert parallelism too), so shard 0's count is the model's, each routed token counted once.
  const std::vector<int32_t>& moe_layers() const { return shards_.front()->model.moe_layers(); }
  const std::vector<int64_t>& expert_tokens() const { return shards_.front()->model.expert_tokens(); }

 private:
  struct shard {
    cpu_model model;
    paged_kv_cache cache;
    std::vector<float> x;        ///< [T][hidden] the shard's copy of the residual stream
    std::vector<float> partial;  ///< [T][hidden] a stage's partial output, then the all-reduced sum
    std::vector<float> logits;   ///< [rows][vocab slice]
  };
  /// All-reduces the shards' `partial` buffers (n floats each).
  void reduce_partials(size_t n);

  shard_plan plan_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::vector<float*> partials_;   ///< scratch: each shard's partial buffer
};

}  // namespace actorserve::gpu::cpu
