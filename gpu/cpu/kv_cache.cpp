#include "gpu/cpu/kv_cache.hpp"

#include <cstring>

namespace actorserve::gpu::cpu {

paged_kv_cache::paged_kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                               int64_t head_dim)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_stride_(static_cast<size_t>(block_size * head_dim)) {
  const size_t n = static_cast<size_t>(num_layers * num_blocks * num_kv_heads) * head_stride_;
  k_.reset(new float[n]);
  v_.reset(new float[n]);
}

size_t paged_kv_cache::bytes_per_block(int64_t num_layers, int64_t block_size, int64_t num_kv_heads,
                                       int64_t head_dim) {
  return 2 * sizeof(float) * static_cast<size_t>(num_layers * block_size * num_kv_heads * head_dim);
}

void paged_kv_cache::copy_block(int64_t src, int64_t dst) {
  if (src == dst) return;
  const size_t bytes = static_cast<size_t>(num_kv_heads_) * head_stride_ * sizeof(float);
  for (int64_t l = 0; l < num_layers_; ++l) {
    std::memcpy(k(l, dst, 0), k(l, src, 0), bytes);
    std::memcpy(v(l, dst, 0), v(l, src, 0), bytes);
  }
}

}  // namespace actorserve::gpu::cpu
