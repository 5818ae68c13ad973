// Cascade attention's shared-prefix pass cut into tiles (gpu/attention/prefix_tiles.*): every
// (member, KV head, piece) in exactly one tile, tiles of at most query_rows rows with the members
// spread evenly, pieces of whole key tiles covering the prefix once, and the piece count rule.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <tuple>

#include "gpu/attention/prefix_tiles.hpp"

namespace actorserve::testing {
namespace {

using gpu::cascade_group;
using gpu::cascade_plan;
using gpu::prefix_tiling;

/// 32/8 heads at 64-row tiles (16 members a tile), an H200's wave of 132 tiles.
prefix_tiling llama8b() {
  prefix_tiling t;
  t.query_rows = 64;
  t.group_heads = 4;
  t.num_kv_heads = 8;
  t.key_tile = 64;
  t.wave = 132;
  return t;
}

cascade_group group(int32_t blocks, int32_t first, int32_t n) {
  cascade_group g;
  g.num_prefix_blocks = blocks;
  g.seqs.resize(size_t(n));
  std::iota(g.seqs.begin(), g.seqs.end(), first);
  return g;
}

/// Checks the tiles of `plan` against `pieces` and returns how many tiles there are.
size_t check_tiles(const cascade_plan& plan, int32_t bs, const std::vector<int32_t>& pieces, const prefix_tiling& t) {
  const auto tiles = gpu::prefix_tiles(plan, bs, pieces, t);
  std::map<std::tuple<int32_t, int32_t, int32_t, int32_t>, int> seen;  // (group, member, head, piece)
  std::map<std::tuple<int32_t, int32_t>, std::pair<int32_t, int32_t>> range;  // (group, piece) -> keys
  for (const auto& tile : tiles) {
    const cascade_group& g = plan.groups[size_t(tile.group)];
    EXPECT_GE(tile.member_count, 1);
    EXPECT_LE(tile.member_count * t.group_heads, t.query_rows);
    EXPECT_EQ(tile.kv_begin % t.key_tile, 0);
    EXPECT_LT(tile.kv_begin, tile.kv_end);
    EXPECT_LE(tile.kv_end, g.num_prefix_blocks * bs);
    for (int32_t m = tile.member_begin; m < tile.member_begin + tile.member_count; ++m)
      ++seen[{tile.group, m, tile.kv_head, tile.piece}];
    const auto r = range.emplace(std::make_tuple(tile.group, tile.piece), std::make_pair(tile.kv_begin, tile.kv_end));
    EXPECT_EQ(r.first->second, std::make_pair(tile.kv_begin, tile.kv_end)) << "one key range a piece";
  }
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const int32_t n = int32_t(plan.groups[gi].seqs.size());
    int32_t next = 0;
    for (int32_t c = 0; c < pieces[gi]; ++c) {
      const auto& [b, e] = range.at({int32_t(gi), c});
      EXPECT_EQ(b, next) << "group " << gi << " piece " << c;
      next = e;
      for (int32_t m = 0; m < n; ++m)
        for (int32_t h = 0; h < t.num_kv_heads; ++h) EXPECT_EQ((seen[{int32_t(gi), m, h, c}]), 1);
    }
    EXPECT_EQ(next, pieces[gi] > 0 ? plan.groups[gi].num_prefix_blocks * bs : 0);
  }
  return tiles.size();
}

TEST(PrefixTiles, TheIssuesBatchFillsAWaveWithOnePiece) {
  // 256 members x 8 KV heads at 16 members a tile: 128 tiles, a wave of 132 already.
  cascade_plan plan;
  plan.groups.push_back(group(64, 0, 256));
  const auto pieces = gpu::prefix_pieces(plan, 64, llama8b());
  EXPECT_EQ(pieces, std::vector<int32_t>{1});
  EXPECT_EQ(check_tiles(plan, 64, pieces, llama8b()), 128u);
  // At 64/8 heads 8 members a tile: 256 tiles.
  prefix_tiling wide = llama8b();
  wide.group_heads = 8;
  EXPECT_EQ(check_tiles(plan, 64, gpu::prefix_pieces(plan, 64, wide), wide), 256u);
}

TEST(PrefixTiles, SmallGroupsCutTheirPrefixIntoWholeTilePieces) {
  // A pair and a group of 20 (two tiles of 10): 3 tiles x 8 heads = 24 with one piece; a wave
  // of 132 asks for 5, capped at 4 and at prefix / 512 keys: the pair's 4096 keys take 4 pieces
  // of 1024, the group's 320 keys one.
  cascade_plan plan;
  plan.groups.push_back(group(64, 0, 2));
  plan.groups.push_back(group(5, 2, 20));
  prefix_tiling t = llama8b();
  const auto at64 = gpu::prefix_pieces(plan, 64, t);
  EXPECT_EQ(at64, (std::vector<int32_t>{4, 1}));
  check_tiles(plan, 64, at64, t);
  // 80-token blocks: the pair's 5120 keys in 4 pieces of whole 64-key tiles (1280 each), the
  // group's 400 keys in one; the last piece ends at the prefix.
  cascade_plan odd;
  odd.groups.push_back(group(64, 0, 2));
  odd.groups.push_back(group(5, 2, 20));
  const auto at80 = gpu::prefix_pieces(odd, 80, t);
  EXPECT_EQ(at80, (std::vector<int32_t>{4, 1}));
  check_tiles(odd, 80, at80, t);
  // 1100 keys in 2 pieces: 576 + 524, the first a whole number of tiles.
  cascade_plan two;
  two.groups.push_back(group(11, 0, 3));
  const auto tiles = gpu::prefix_tiles(two, 100, std::vector<int32_t>{2}, t);
  ASSERT_EQ(tiles.size(), 16u);
  EXPECT_EQ(tiles[0].kv_end, 576);
  EXPECT_EQ(tiles[1].kv_begin, 576);
  EXPECT_EQ(tiles[1].kv_end, 1100);
}

TEST(PrefixTiles, MembersSpreadEvenlyAndGroupsWithoutPiecesGetNoTiles) {
  // 17 members at 16 a tile: two tiles of 9 and 8, not 16 and 1. A group given 0 pieces (the
  // backend leaves it on the per-sequence path) gets no tile.
  cascade_plan plan;
  plan.groups.push_back(group(8, 0, 17));
  plan.groups.push_back(group(8, 17, 5));
  prefix_tiling t = llama8b();
  t.num_kv_heads = 1;
  const auto tiles = gpu::prefix_tiles(plan, 64, std::vector<int32_t>{1, 0}, t);
  ASSERT_EQ(tiles.size(), 2u);
  EXPECT_EQ(tiles[0].member_count, 9);
  EXPECT_EQ(tiles[1].member_begin, 9);
  EXPECT_EQ(tiles[1].member_count, 8);
  for (const auto& tile : tiles) EXPECT_EQ(tile.group, 0);
}

}  // namespace
}  // namespace actorserve::testing
