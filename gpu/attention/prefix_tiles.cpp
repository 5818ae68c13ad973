#include "gpu/attention/prefix_tiles.hpp"

#include <algorithm>

namespace actorserve::gpu {

int32_t members_per_tile(const prefix_tiling& t) { return std::max(1, t.query_rows / std::max(1, t.group_heads)); }

std::vector<int32_t> prefix_pieces(const cascade_plan& plan, int32_t block_size, const prefix_tiling& t) {
  const int64_t per_tile = members_per_tile(t);
  int64_t tiles = 0;  // with one piece a prefix
  for (const cascade_group& g : plan.groups) tiles += (int64_t(g.seqs.size()) + per_tile - 1) / per_tile;
  tiles *= t.num_kv_heads;
  const int64_t fill = std::clamp<int64_t>(t.wave / std::max<int64_t>(1, tiles), 1, t.max_pieces);
  std::vector<int32_t> pieces;
  for (const cascade_group& g : plan.groups) {
    const int64_t keys = int64_t(g.num_prefix_blocks) * block_size;
    pieces.push_back(static_cast<int32_t>(std::min<int64_t>(fill, std::max<int64_t>(1, keys / t.min_piece_keys))));
  }
  return pieces;
}

std::vector<prefix_tile> prefix_tiles(const cascade_plan& plan, int32_t block_size, std::span<const int32_t> pieces,
                                      const prefix_tiling& t) {
  std::vector<prefix_tile> out;
  const int32_t per_tile = members_per_tile(t);
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const cascade_group& g = plan.groups[gi];
    const int32_t n = static_cast<int32_t>(g.seqs.size()), np = pieces[gi];
    const int32_t P = g.num_prefix_blocks * block_size;
    if (np <= 0 || n == 0 || P <= 0) continue;
    const int32_t n_tiles = (n + per_tile - 1) / per_tile, members = (n + n_tiles - 1) / n_tiles;
    // Whole key tiles a piece; the last takes the rest (min_piece_keys >= key_tile x max_pieces
    // keeps it non-empty).
    const int32_t piece_len = ((P + np - 1) / np + t.key_tile - 1) / t.key_tile * t.key_tile;
    for (int32_t h = 0; h < t.num_kv_heads; ++h)
      for (int32_t c = 0; c < np; ++c)
        for (int32_t m0 = 0; m0 < n; m0 += members) {
          prefix_tile tile;
          tile.group = static_cast<int32_t>(gi);
          tile.kv_head = h;
          tile.piece = c;
          tile.kv_begin = c * piece_len;
          tile.kv_end = std::min(P, (c + 1) * piece_len);
          tile.member_begin = m0;
          tile.member_count = std::min(members, n - m0);
          out.push_back(tile);
        }
  }
  return out;
}

}  // namespace actorserve::gpu
