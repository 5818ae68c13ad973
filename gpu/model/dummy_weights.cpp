#include "gpu/model/dummy_weights.hpp"

namespace actorserve::gpu {

void fill_dummy_f32(const dummy_fill& f, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dummy_bf16_to_f32(dummy_bf16_bits(f.seed, f.tensor_id, f.first + i, f.ones));
}

}  // namespace actorserve::gpu
