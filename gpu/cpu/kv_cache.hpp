#pragma once
/// The CPU executor's paged KV cache. What a token stores per layer is the attention's business
/// (kv_cache_layout): per-head keys and values, K and V each [kv_head][slot][head_dim] within a
/// block so one head's keys are contiguous, or multi-head latent attention's one row per slot of
/// c_kv then k_pe, shared by every head. Blocks are [layer][block][...]; the block manager above
/// sees only block ids and the bytes a block takes.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "config/model_config.hpp"

namespace actorserve::gpu::cpu {

/// What one token stores in one layer.
struct kv_cache_layout {
  int64_t num_kv_heads = 0;   ///< per head: K and V of head_dim per kv head (0 for a latent layout)
  int64_t head_dim = 0;
  int64_t latent_dim = 0;     ///< latent: one row of c_kv (kv_lora_rank) then k_pe (qk_rope_head_dim)

  static kv_cache_layout per_head(int64_t num_kv_heads, int64_t head_dim) { return {num_kv_heads, head_dim, 0}; }
  static kv_cache_layout latent(int64_t latent_dim) { return {0, 0, latent_dim}; }
  /// The layout of `cfg`'s attention: latent for MLA, else per head.
  static kv_cache_layout of(const model_config& cfg);

  bool is_latent() const { return latent_dim > 0; }
  /// Floats one token takes in one layer.
  int64_t floats_per_token() const { return is_latent() ? latent_dim : 2 * num_kv_heads * head_dim; }
};

class paged_kv_cache {
 public:
  paged_kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, kv_cache_layout layout);

  /// Bytes one block takes over all layers.
  static size_t bytes_per_block(int64_t num_layers, int64_t block_size, const kv_cache_layout& layout);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  const kv_cache_layout& layout() const { return layout_; }
  /// Per-head layout: [block_size][head_dim] keys of one (layer, block, kv_head).
  float* k(int64_t layer, int64_t block, int64_t head) { return block_data(layer, block) + head * head_stride_; }
  /// Per-head layout: [block_size][head_dim] values of one (layer, block, kv_head).
  float* v(int64_t layer, int64_t block, int64_t head) {
    return block_data(layer, block) + (layout_.num_kv_heads + head) * head_stride_;
  }
  /// Latent layout: [block_size][latent_dim] rows of one (layer, block).
  float* latent(int64_t layer, int64_t block) { return block_data(layer, block); }
  /// Copies a whole block (all layers) from src to dst.
  void copy_block(int64_t src, int64_t dst);

 private:
  float* block_data(int64_t layer, int64_t block) {
    return data_.get() + (static_cast<size_t>(layer) * static_cast<size_t>(num_blocks_) + static_cast<size_t>(block)) *
                             block_stride_;
  }
  int64_t num_layers_, num_blocks_, block_size_;
  kv_cache_layout layout_;
  int64_t head_stride_;   ///< per head: block_size * head_dim floats
  size_t block_stride_;   ///< floats of one (layer, block)
  // NOTE: left uninitialised on purpose: pages are only touched when a block is first written.
  std::unique_ptr<float[]> data_;
};

}  // namespace actorserve::gpu::cpu
