#pragma once
/// The CPU executor's paged KV cache: K and V each laid out
/// [layer][block][kv_head][slot][head_dim], so one head's keys within a block are contiguous.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace actorserve::gpu::cpu {

class paged_kv_cache {
 public:
  paged_kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                 int64_t head_dim);

  /// Bytes one block takes over all layers, K and V.
  static size_t bytes_per_block(int64_t num_layers, int64_t block_size, int64_t num_kv_heads, int64_t head_dim);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  /// [block_size][head_dim] keys of one (layer, block, kv_head).
  float* k(int64_t layer, int64_t block, int64_t head) { return k_.get() + offset(layer, block, head); }
  float* v(int64_t layer, int64_t block, int64_t head) { return v_.get() + offset(layer, block, head); }
  /// Copies a whole block (all layers, K and V) from src to dst.
  void copy_block(int64_t src, int64_t dst);

 private:
  size_t offset(int64_t layer, int64_t block, int64_t head) const {
    return ((static_cast<size_t>(layer) * num_blocks_ + block) * num_kv_heads_ + head) * head_stride_;
  }
  int64_t num_layers_, num_blocks_, block_size_, num_kv_heads_;
  size_t head_stride_;   ///< block_size * head_dim floats
  // NOTE: left uninitialised on purpose: pages are only touched when a block is first written.
  std::unique_ptr<float[]> k_, v_;
};

}  // namespace actorserve::gpu::cpu
