#pragma once
/// Host-side work planning for paged_attention: query tiles per sequence and KV head, and split-KV
/// pieces when there are too few tiles to fill the GPU (decode with few long sequences).
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {

struct attention_plan {
  std::vector<attn_item> items;
  std::vector<attn_combine> combines;
  int32_t num_partials = 0;      ///< partial slots used (<= the capacity given)
  int32_t num_decode_items = 0;  ///< the last items are decode pieces (attention backends' decode kernels)
  /// Cascade prefix pieces (staged right after `items`) and their member rows: empty when no
  /// decode takes a shared-prefix pass.
  std::vector<attn_item> prefix_items;
  std::vector<attn_prefix_row> prefix_rows;
  int32_t cascade_seqs = 0;      ///< sequences whose decode takes a prefix piece
};

/// Sets each decode piece's first_block (the plan's last num_decode_items items) to the block
/// holding its key kv_begin, looked up in the step's block tables (`bs` tokens per block): the
/// decode kernel's first copy then waits on the item alone. A piece whose table entry lies
/// outside `block_tables` gets -1 (the kernel reads the table).
void set_first_blocks(attention_plan& plan, std::span<const int32_t> block_tables, int bs);

/// The first key of a work item whose first query sits at position `pos`, under a sliding
/// window of `window` keys (0: none, key 0): the start of the `key_tile`-key tile holding
/// window_first_key(pos, window). Whole tiles below the window are never read; the kernels mask
/// the keys of that first tile below each row's window.
int32_t window_tile_begin(int32_t pos, int window, int key_tile);

/// Appends the query tiles of the sequences with q_len >= min_q_len to `out`: tiles of
/// tile_rows / group tokens (at least one), one item per KV head, each over the keys its queries
/// see: up to its last query's position, from the `key_tile`-aligned start of its first query's
/// `window` (window_tile_begin). Shared by plan_attention and the attention backends.
void append_query_tiles(std::span<const attn_seq> seqs, int group, int num_kv_heads, int tile_rows, int min_q_len,
                        int window, int key_tile, std::vector<attn_item>& out);

/// Tiles `seqs` (each query token at position pos = context_len - q_len + i sees keys [0, pos],
/// or [pos - window + 1, pos] with a `window`). `target_blocks`: split long key ranges until
/// about this many thread blocks exist (0: never); at most `max_partials` partial slots are used.
attention_plan plan_attention(std::span<const attn_seq> seqs, int num_heads, int num_kv_heads,
                              int target_blocks, int max_partials, int window = 0);

}  // namespace actorserve::gpu::cuda
