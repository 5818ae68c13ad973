#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

#include <algorithm>

namespace actorserve::gpu::cuda {
namespace {

constexpr int32_t min_split_len = 128;

int32_t ceil_div(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

}  // namespace

void set_first_blocks(attention_plan& plan, std::span<const int32_t> block_tables, int bs) {
  for (attn_item& it : std::span(plan.items).last(size_t(plan.num_decode_items))) {
    const int64_t k = bs > 0 && it.bt_offset >= 0 && it.kv_begin >= 0 ? int64_t(it.bt_offset) + it.kv_begin / bs : -1;
    it.first_block = k >= 0 && k < int64_t(block_tables.size()) ? block_tables[size_t(k)] : -1;
  }
}

int32_t window_tile_begin(int32_t pos, int window, int key_tile) {
  const int32_t first = std::max<int32_t>(0, window_first_key(pos, window));
  return key_tile > 0 ? first / key_tile * key_tile : first;
}

void append_query_tiles(std::span<const attn_seq> seqs, int group, int num_kv_heads, int tile_rows, int min_q_len,
                        int window, int key_tile, std::vector<attn_item>& out) {
  const int tile_tokens = std::max(1, tile_rows / group);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const attn_seq& sq = seqs[s];
    if (sq.q_len < min_q_len) continue;
    const int32_t ctx_before = sq.context_len - sq.q_len;
    for (int32_t t0 = 0; t0 < sq.q_len; t0 += tile_tokens) {
      const int32_t len = std::min(tile_tokens, sq.q_len - t0);
      for (int h = 0; h < num_kv_heads; ++h) {
        attn_item it;
        it.seq = static_cast<int32_t>(s);
        it.bt_offset = sq.bt_offset;
        it.context_len = sq.context_len;
        it.q_begin = sq.q_start + t0;
        it.q_len = len;
        it.kv_head = h;
        it.kv_begin = window_tile_begin(ctx_before + t0, window, key_tile);
        it.kv_end = ctx_before + t0 + len;  // the tile's last query sees keys up to its position
        out.push_back(it);
      }
    }
  }
}

attention_plan plan_attention(std::span<const attn_seq> seqs, int num_heads, int num_kv_heads,
                              int target_blocks, int max_partials, int window) {
  attention_plan plan;
  std::vector<attn_item> base;
  append_query_tiles(seqs, num_heads / num_kv_heads, num_kv_heads, attn_tile_rows, 0, window, generic_key_chunk, base);
  // Pieces cut the keys an item reads: [kv_begin, kv_end), the windowed range with a window.
  const auto keys = [](const attn_item& it) { return it.kv_end - it.kv_begin; };
  int64_t total_kv = 0;
  for (const attn_item& it : base) total_kv += keys(it);
  const int64_t n = static_cast<int64_t>(base.size());
  int32_t split_len = 0;
  if (target_blocks > 0 && n > 0 && n < target_blocks) {
    split_len = std::max<int32_t>(min_split_len, ceil_div(total_kv, target_blocks));
    split_len = ceil_div(split_len, 32) * 32;
    for (;;) {  // grow the pieces until the partial slots suffice
      int64_t slots = 0;
      for (const attn_item& it : base)
        if (keys(it) > split_len) slots += ceil_div(keys(it), split_len);
      if (slots <= max_partials) break;
      split_len *= 2;
    }
  }
  for (const attn_item& it : base) {
    if (split_len == 0 || keys(it) <= split_len) {
      plan.items.push_back(it);
      continue;
    }
    attn_combine cb;
    cb.q_begin = it.q_begin;
    cb.q_len = it.q_len;
    cb.kv_head = it.kv_head;
    cb.first_partial = plan.num_partials;
    cb.num_splits = ceil_div(keys(it), split_len);
    for (int32_t sp = 0; sp < cb.num_splits; ++sp) {
      attn_item piece = it;
      piece.kv_begin = it.kv_begin + sp * split_len;
      piece.kv_end = std::min(it.kv_end, piece.kv_begin + split_len);
      piece.partial = plan.num_partials++;
      plan.items.push_back(piece);
    }
    plan.combines.push_back(cb);
  }
  return plan;
}

}  // namespace actorserve::gpu::cuda
