#pragma once
/// Tensor parallelism's slice plan (--tensor-parallel-size N): which part of each weight, of the
/// KV cache and of the vocabulary each of N shards holds. Megatron's split, as vLLM does it:
///
///   column-parallel   q/k/v_proj by heads, gate/up_proj by intermediate columns, each expert's
///                     gate/up by its intermediate columns (MoE: tensor parallel inside every
///                     expert, the default), the shared experts' likewise, DeepSeek-V2's
///                     q(_b)_proj and kv_b_proj by heads;
///   row-parallel      o_proj and down_proj by the matching input columns; their partial outputs
///                     are summed over the shards (the all-reduce), and a bias is added once;
///   replicated        norms, the router, DeepSeek-V2's kv_a / q_a projections (hence its latent
///                     KV cache), and KV heads when there are fewer than N (shard i then holds
///                     KV head i / (N / num_kv_heads));
///   vocab-parallel    embed_tokens and lm_head rows: a shard embeds the tokens of its slice
///                     (zeros elsewhere, summed like a row-parallel output) and computes the logits
///                     of its slice (gathered);
///   expert-parallel   with moe_parallelism::expert (--enable-expert-parallel), the routed
///                     experts instead: shard i holds whole experts, a contiguous range of ids;
///                     its output (only the tokens routed to them) is summed like a row-parallel
///                     one, so a sparse layer still ends in one all-reduce.
///
/// Slices are contiguous and balanced: shard i of n items over N holds [i*n/N, (i+1)*n/N).
/// Heads must split evenly (N divides num_heads; KV heads: N divides them or they divide N);
/// intermediate columns, the vocabulary and the experts need not.
#include <cstdint>

#include "config/error.hpp"
#include "config/model_config.hpp"

namespace actorserve::gpu {

/// A contiguous range [begin, end) of heads, columns or token ids.
struct shard_slice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
  friend bool operator==(const shard_slice&, const shard_slice&) = default;
};

/// How a mixture-of-experts layer's routed experts split over the shards.
enum class moe_parallelism : uint8_t {
  tensor,   ///< every shard holds a slice of every expert's intermediate columns
  expert,   ///< every shard holds whole experts (--enable-expert-parallel)
};

class shard_plan {
 public:
  /// The plan for `cfg` over `size` shards; an error naming --tensor-parallel-size when the
  /// model's heads do not split over that many, or --enable-expert-parallel when `moe` is expert
  /// and the model has no routed experts or fewer than `size`.
  static result<shard_plan> make(const model_config& cfg, int64_t size,
                                 moe_parallelism moe = moe_parallelism::tensor);

  int64_t size() const { return size_; }
  /// Query heads of shard `s` (DeepSeek-V2: its attention heads).
  shard_slice q_heads(int64_t s) const { return balanced(cfg_.num_heads, s); }
  /// KV heads of shard `s`: its share, or the one replicated head its query heads attend to.
  shard_slice kv_heads(int64_t s) const;
  /// Whether shards hold copies of the same KV heads (fewer KV heads than shards).
  bool kv_heads_replicated() const { return !cfg_.mla && cfg_.num_kv_heads < size_; }
  /// Columns of a dense MLP's intermediate (gate/up rows, down_proj columns).
  shard_slice intermediate(int64_t s) const { return balanced(cfg_.intermediate_size, s); }
  moe_parallelism moe() const { return moe_; }
  /// Routed experts shard `s` holds: all of them (tensor), or its balanced range of ids (expert).
  shard_slice experts(int64_t s) const;
  /// Columns of each routed expert's intermediate that shard `s` holds: its slice (tensor), or
  /// all of them (expert).
  shard_slice expert_intermediate(int64_t s) const;
  /// Weight elements of the routed experts (gate, up and down) shard `s` holds in one sparse
  /// layer; times the bytes of an element, the routed experts' bytes per layer on that shard.
  int64_t expert_elements(int64_t s) const;
  /// Columns of the shared experts' intermediate (num_shared_experts x expert_intermediate_size).
  shard_slice shared_expert_intermediate(int64_t s) const;
  /// Token ids whose embedding rows and logits shard `s` holds.
  shard_slice vocab(int64_t s) const { return balanced(cfg_.vocab_size, s); }
  /// Whether shard `s` adds the row-parallel projections' biases (exactly one shard does).
  bool holds_row_bias(int64_t s) const { return s == 0; }
  /// The model as shard `s` sees it: its heads, KV heads, intermediate sizes and vocabulary size.
  model_config shard_config(int64_t s) const;
  const model_config& config() const { return cfg_; }

 private:
  shard_plan(model_config cfg, int64_t size, moe_parallelism moe) : cfg_(std::move(cfg)), size_(size), moe_(moe) {}
  shard_slice balanced(int64_t n, int64_t s) const { return {s * n / size_, (s + 1) * n / size_}; }

  model_config cfg_;
  int64_t size_ = 1;
  moe_parallelism moe_ = moe_parallelism::tensor;
};

}  // namespace actorserve::gpu
