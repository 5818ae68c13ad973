#include "gpu/cuda/mla/up_projected_plan.hpp"

#include <algorithm>

namespace actorserve::gpu::cuda {
namespace {

int tiles(int queries) { return (queries + mla_up_projected_rows - 1) / mla_up_projected_rows; }

/// Keys the last query of an item of l sees.
int item_keys(const mla_up_projected_launch& l, mla_up_projected_item it) {
  const mla_up_projected_piece& p = l.pieces[it.piece];
  return p.context - p.queries + std::min((it.tile + 1) * mla_up_projected_rows, p.queries);
}

/// Orders l's items by the keys their last query sees, most first (piece and tile break ties).
void order_items(mla_up_projected_launch& l) {
  std::sort(l.items, l.items + l.num_items, [&](mla_up_projected_item a, mla_up_projected_item b) {
    const int ka = item_keys(l, a), kb = item_keys(l, b);
    return ka != kb ? ka > kb : a.piece != b.piece ? a.piece < b.piece : a.tile < b.tile;
  });
}

/// Adds a sequence's queries to the group's launches as pieces of whole query tiles.
void add_queries(std::vector<mla_up_projected_launch>& launches, const attn_seq& s, int kv_row) {
  int done = 0;  // queries of s placed
  while (done < s.q_len) {
    if (launches.empty() || launches.back().num_pieces == mla_up_projected_max_pieces ||
        launches.back().num_items == mla_up_projected_max_items)
      launches.emplace_back();
    mla_up_projected_launch& l = launches.back();
    const int room = mla_up_projected_max_items - l.num_items;
    const int queries = std::min(s.q_len - done, room * mla_up_projected_rows);
    // The piece ends at query done + queries of the chunk, so its keys end at that query's position + 1.
    const int first_pos = s.context_len - s.q_len;
    const int piece = l.num_pieces++;
    l.pieces[piece] = {.q_row = s.q_start + done, .queries = queries, .kv_row = kv_row,
                       .context = first_pos + done + queries};
    for (int t = 0; t < tiles(queries); ++t) l.items[l.num_items++] = {.piece = uint16_t(piece), .tile = uint16_t(t)};
    done += queries;
  }
}

}  // namespace

std::vector<mla_up_projected_group> plan_up_projected(std::span<const attn_seq> seqs, int workspace_tokens) {
  std::vector<mla_up_projected_group> groups;
  for (int i = 0; i < int(seqs.size()); ++i) {
    const attn_seq& s = seqs[size_t(i)];
    if (s.context_len > workspace_tokens) return {};
    if (groups.empty() || groups.back().context_rows + s.context_len > workspace_tokens)
      groups.push_back({.first = i, .kv_rows = {}, .context_rows = 0, .launches = {}});
    mla_up_projected_group& g = groups.back();
    add_queries(g.launches, s, g.context_rows);
    g.kv_rows.push_back(g.context_rows);
    g.context_rows += s.context_len;
  }
  for (mla_up_projected_group& g : groups)
    for (mla_up_projected_launch& l : g.launches) order_items(l);
  return groups;
}

}  // namespace actorserve::gpu::cuda
