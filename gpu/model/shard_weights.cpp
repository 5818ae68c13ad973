#include "gpu/model/shard_weights.hpp"

#include "config/check.hpp"
#include "gpu/model/shard_views.hpp"

namespace actorserve::gpu {

model_weights_f32 shard_weights_f32(const model_weight_views& views, const shard_plan& plan, int64_t shard) {
  auto cut = cut_shard_views(views, plan, shard, block_cut::dequantize);
  AS_CHECK(cut.ok(), "shard_weights_f32: dequantizing cut blocks leaves no error");
  return upcast_weights(cut->views);
}

}  // namespace actorserve::gpu
