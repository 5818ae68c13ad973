#include "gpu/cpu/kv_cache.hpp"

#include <cstring>

namespace actorserve::gpu::cpu {

kv_cache_layout kv_cache_layout::of(const model_config& cfg) {
  if (cfg.mla) return latent(cfg.mla->cache_dim());
  return per_head(cfg.num_kv_heads, cfg.head_dim);
}

paged_kv_cache::paged_kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, kv_cache_layout layout)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      layout_(layout),
      head_stride_(block_size * layout.head_dim),
      block_stride_(static_cast<size_t>(block_size * layout.floats_per_token())) {
  data_.reset(new float[static_cast<size_t>(num_layers * num_blocks) * block_stride_]);
}

size_t paged_kv_cache::bytes_per_block(int64_t num_layers, int64_t block_size, const kv_cache_layout& layout) {
  return sizeof(float) * static_cast<size_t>(num_layers * block_size * layout.floats_per_token());
}

void paged_kv_cache::copy_block(int64_t src, int64_t dst) {
  if (src == dst) return;
  for (int64_t l = 0; l < num_layers_; ++l)
    std::memcpy(block_data(l, dst), block_data(l, src), block_stride_ * sizeof(float));
}

}  // namespace actorserve::gpu::cpu
