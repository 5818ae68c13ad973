#pragma once
/// The attention work description shared by every attention kernel (sequences, work items,
/// split merges) and the generic CUDA-core paged attention (`attention_kernels.cu`).
/// Launchers are plain C++ (no device code): callable from .cpp files. Each enqueues on `stream`
/// and returns the launch's cudaError_t as an int (0 = success).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

/// One sequence of an attention call.
struct attn_seq {
  int32_t q_start = 0;       ///< first of its query tokens in the step's token order
  int32_t q_len = 0;         ///< its query tokens this step
  int32_t context_len = 0;   ///< tokens in the cache once this step's are written
  int32_t bt_offset = 0;     ///< its block table starts at block_tables[bt_offset]
};

/// One thread block's work: a tile of query tokens of one sequence and one KV head, over the key
/// range [kv_begin, kv_end). partial >= 0: an unnormalised partial result goes to that slot.
struct attn_item {
  int32_t seq = 0, q_begin = 0, q_len = 0, kv_head = 0;
  int32_t kv_begin = 0, kv_end = 0, partial = -1, pad = 0;
  /// Copies of seqs[seq]'s fields: a decode CTA finds its block table without first reading the
  /// sequence, one dependent load fewer before its first K/V copy.
  int32_t bt_offset = 0, context_len = 0;
  /// Decode pieces: the block holding key kv_begin (set_first_blocks), so the flash-decoding
  /// kernel issues its first K/V copy without reading the block table; -1: read the table.
  int32_t first_block = -1;
};

/// Merges `num_splits` consecutive partial slots starting at `first_partial` into the output of
/// the tile (q_begin, q_len, kv_head).
struct attn_combine {
  int32_t q_begin = 0, q_len = 0, kv_head = 0, first_partial = 0, num_splits = 0, pad[3] = {0, 0, 0};
};

/// Query rows (tokens x heads of one KV group) a thread block handles.
inline constexpr int attn_tile_rows = 32;

struct attention_args {
  const float* q = nullptr;          ///< token t, head h at q[t * q_stride + h * D]
  int q_stride = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
  const attn_item* items = nullptr;
  const attn_combine* combines = nullptr;
  const int32_t* counts = nullptr;   ///< device: [0] items, [1] combines (grids may be larger)
  int item_grid = 0, combine_grid = 0;
  float* partial_acc = nullptr;      ///< [slots, attn_tile_rows, D]
  float* partial_ml = nullptr;       ///< [slots, attn_tile_rows, 2] (max in log2 units, sum)
  void* out = nullptr;               ///< [tokens, H * D] of dt
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;                ///< softmax scale (1/sqrt(D))
};

/// Causal paged attention for prefill chunks and decode alike: each query token at position p
/// attends to cached keys [0, p]. Head dims: multiples of 8 up to 256.
int paged_attention(act_dtype dt, const attention_args& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
