#pragma once
/// One tensor-parallel shard's weights as stored (the checkpoint's dtype: bf16, fp16, f32, or FP8
/// with its scales), cut out of the whole model's views by shard_plan's rules: what a device
/// uploader reads for one shard, and what shard_weights_f32 upcasts. A row slice is a view into
/// the mapped data (an FP8 per-channel or block scale is cut with its rows); a column slice
/// (o_proj, down_proj, the experts' down_proj) is copied into a buffer the result owns. A dummy
/// tensor's row slice stays generated; its column slice is generated into an owned bf16 buffer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/error.hpp"
#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"

namespace actorserve::gpu {

/// What a slice that cuts an FP8 weight's 128 x 128 scale block (weight_block_size) becomes.
enum class block_cut {
  refuse,       ///< an error naming --tensor-parallel-size (the CUDA loader: shards hold whole blocks, as vLLM)
  dequantize,   ///< the slice dequantized to an owned f32 tensor (the CPU computes in fp32 anyway)
};

/// A shard's views and the buffers its column slices live in (views point into them; moving
/// the struct keeps them valid). Valid while the whole model's weight_store lives too.
struct shard_weight_views {
  model_weight_views views;
  std::vector<std::unique_ptr<std::byte[]>> owned;
  /// Bytes of the weights as this shard holds them (what a device upload of them reads).
  uint64_t total_bytes() const;
};

/// Shard `shard`'s views under `plan`: q/k/v_proj (+ biases) rows by heads (KV heads replicated
/// when fewer than the shards), o_proj columns, gate/up rows and down columns by intermediate
/// columns, each routed expert's likewise (tensor parallel) or the shard's whole experts (expert
/// parallel; moe_views::first_expert), the shared experts', DeepSeek-V2's q(_b)_proj and
/// kv_b_proj rows per head, embed_tokens and lm_head rows by vocabulary (a tied lm_head stays the
/// shard's embedding rows), o_proj's bias only on the shard that holds_row_bias; norms, routers
/// and latent kv_a / q_a projections whole. An error when `cut` is refuse and a slice cuts an FP8
/// scale block. Over one shard: the whole model's views, nothing copied.
result<shard_weight_views> cut_shard_views(const model_weight_views& views, const shard_plan& plan, int64_t shard,
                                           block_cut cut = block_cut::refuse);

}  // namespace actorserve::gpu
