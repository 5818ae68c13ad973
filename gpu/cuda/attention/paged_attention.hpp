#pragma once
/// The attention work description shared by every attention kernel (sequences, work items,
/// split merges, and `attn_launch`, the arguments of one attention call) and the generic
/// CUDA-core paged attention (`attention_kernels.cu`).
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

/// A query row group of a cascade prefix item (attn_item::q_begin indexes them, q_len counts
/// them): one group member's decode token, whose G query heads are G rows of the item, and the
/// partial slot that member's piece over the item's keys goes to.
struct attn_prefix_row {
  int32_t token = 0, partial = 0;
};

/// Query rows (tokens x heads of one KV group) a thread block handles.
inline constexpr int attn_tile_rows = 32;
/// Keys the generic kernel stages at a time (a windowed item starts at a multiple of it).
inline constexpr int generic_key_chunk = 32;

/// One attention call (one layer). Items [0, counts[0]) are prefill tiles, items
/// [counts[0], counts[0] + counts[2]) decode pieces, the next counts[3] items cascade prefix
/// pieces (prefix_rows); counts[1] combines merge split decode pieces and cascade members.
struct attn_launch {
  const float* q = nullptr;          ///< token t, head h at q[t * q_stride + h * D] (fp32)
  int q_stride = 0;
  /// Optional, for the persistent prefill kernel: the rotated queries as the activation dtype,
  /// already times scale * log2(e) ([tokens, num_heads, head_dim]; rope_kv_args::q16). It
  /// copies them in asynchronously instead of converting q itself.
  const void* q16 = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
  const attn_item* items = nullptr;
  const attn_combine* combines = nullptr;
  const int32_t* counts = nullptr;   ///< device: [0] prefill items, [1] combines, [2] decode items
  int prefill_grid = 0, decode_grid = 0, combine_grid = 0;  ///< launch sizes (upper bounds)
  /// Cascade: the prefix pieces' member rows, and their kernel's grid (0: no cascade in this layer).
  const attn_prefix_row* prefix_rows = nullptr;
  int prefix_grid = 0;
  /// Split pieces' scratch, [slots, rows, D] and [slots, rows, 2] with rows = the backend's
  /// partial_rows() (tensor-core kernels: max_merge_rows; the generic kernel: attn_tile_rows). The
  /// tensor-core kernels store normalised outputs and [0] = the piece's log2-sum-exp; the generic
  /// kernel unnormalised sums and (max in log2 units, sum of exponentials).
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  void* out = nullptr;               ///< [tokens, H * D] of the activation dtype
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;                ///< softmax scale (1/sqrt(D))
  /// --kv-cache-dtype fp8: k_cache and v_cache hold one E4M3 byte per element (rope_kv_args::
  /// kv_fp8), the codes of K / k_scale and V / v_scale (this layer's scales). Only the
  /// flash-decoding decode kernel reads such a cache (launch_fd_decode): it multiplies the
  /// softmax scale by k_scale and the output by v_scale.
  bool kv_fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
  /// Filled by the backend in run(), not by callers: one zeroed counter per combine. When set,
  /// the last decode piece of each split (sequence, KV head) merges the pieces itself (a split
  /// piece's attn_item::pad holds its combine index) and no merge kernel is launched.
  int32_t* split_counters = nullptr;
  /// Sliding window (Mistral's sliding_window; 0: none): a query at position p sees keys
  /// [max(0, p - window + 1), p]. Filled by the backend in run() from attention_shape::window,
  /// which its plan() also reads (items start at the tile holding the first key in the window).
  int window = 0;
  /// Every decode row's keys before its newest one were in the cache before this step, so a
  /// decode piece may copy them before waiting for the previous kernel (rope_kv_write's K/V
  /// writes). False for the sampled rows of a prefill-carrying step's last layer: there a row's
  /// whole chunk of keys was written by this step, and nothing is copied before the wait.
  bool older_keys_cached = true;
};

/// The first key a query at position `pos` sees under `window` (attn_launch::window; 0: none,
/// INT32_MIN, so that no key is below it): keys pos - window + 1 .. pos, as transformers masks
/// Mistral's. Host and device (constexpr: nvcc runs it on the device with --expt-relaxed-constexpr).
constexpr int32_t window_first_key(int32_t pos, int32_t window) {
  return window > 0 ? pos - window + 1 : INT32_MIN;
}

/// Causal paged attention for prefill chunks and decode alike: each query token at position p
/// attends to cached keys [0, p], or [p - window + 1, p] with a window. Head dims: multiples of 8
/// up to 256.
int paged_attention(act_dtype dt, const attn_launch& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
