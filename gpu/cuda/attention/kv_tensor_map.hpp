#pragma once
/// TMA (the Hopper bulk tensor copy engine) descriptors over the paged K/V cache, for the
/// kernels that load whole boxes of one block (or 64 tokens) x 64 elements with one instruction:
/// the persistent prefill (prefill_pingpong_kernel.cu) and flash-decoding (decode_kernels.cu).
/// Host code; the descriptors travel as a __grid_constant__ kernel parameter.
#include <cuda.h>

namespace actorserve::gpu::cuda {

/// The K and V descriptors of one layer's caches and the rows of their boxes.
struct kv_tensor_maps {
  CUtensorMap k, v;
  int box_rows = 0;  ///< tokens per box: min(block size, 64), so a box never spans two blocks
};

/// Columns of the box one TMA copy moves: 64 16-bit elements, one 128-byte swizzled line.
inline constexpr int kv_box_cols = 64;

/// The tokens per box for KV blocks of `block_size` tokens (0: no box fits).
inline constexpr int kv_box_rows(int block_size) {
  return block_size >= 64 ? (block_size % 64 == 0 ? 64 : 0)
                          : (block_size >= 8 && (block_size & (block_size - 1)) == 0 ? block_size : 0);
}

/// Describes `cache` (a [tokens, num_kv_heads x head_dim] array of 16-bit elements whose rows
/// run to the end of the device allocation holding it) as a 2-D tensor with boxes of
/// `box_rows` x 64 elements and the 128-byte shared-memory swizzle. False (nothing written)
/// where the driver lacks the entry points, the pointer is not a device allocation, or the
/// shape does not fit a descriptor.
bool make_kv_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_rows, CUtensorMap* out);

/// Both descriptors of a layer with blocks of `block_size` tokens; false where either fails.
bool make_kv_tensor_maps(const void* k_cache, const void* v_cache, int num_kv_heads, int head_dim, int block_size,
                         kv_tensor_maps* out);

}  // namespace actorserve::gpu::cuda
