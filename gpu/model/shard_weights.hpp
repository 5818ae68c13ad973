#pragma once
/// One tensor-parallel shard's weights in fp32: its views as cut by cut_shard_views (the one
/// slicing rule, shared with the CUDA loader), upcast. Row slices are upcast alone; a column slice
/// is copied in the stored dtype first, so a shard never holds more than its slice in fp32. A slice
/// that cuts an FP8 scale block is dequantized from the whole tensor (the CPU computes in fp32).
/// Under expert parallelism a shard's routed experts are its range of whole experts; the others
/// are not read.
#include <cstdint>

#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"

namespace actorserve::gpu {

/// Shard `shard`'s weights under `plan` (over one shard: the whole model, as upcast_weights).
/// The row-parallel biases (o_proj's) go to the shard that holds_row_bias, an empty vector to the
/// others; a tied lm_head stays tied to the shard's embedding rows.
model_weights_f32 shard_weights_f32(const model_weight_views& views, const shard_plan& plan, int64_t shard);

}  // namespace actorserve::gpu
