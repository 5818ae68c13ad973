#pragma once
/// Cascade attention's shared-prefix pass cut into tiles for a tensor-core kernel: each group's
/// prefix into pieces of whole key tiles (more pieces when the groups alone leave the GPU short
/// of a wave), each piece's members into tiles of query rows (members x the query heads of one
/// KV head). Plain code: the CUDA flash-decoding backend turns the tiles into work items
/// (docs/attention.md, "Cascade attention"); tests/model/prefix_tiles_test.cpp.
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/attention/cascade_plan.hpp"

namespace actorserve::gpu {

struct prefix_tiling {
  int32_t query_rows = 64;       ///< rows of one tile: members x group_heads
  int32_t group_heads = 1;       ///< query heads per KV head
  int32_t num_kv_heads = 1;
  int32_t key_tile = 64;         ///< pieces start on multiples of this many keys
  int32_t wave = 1;              ///< tiles that fill the GPU once
  int32_t max_pieces = 4;        ///< pieces of one prefix at most
  int32_t min_piece_keys = 512;  ///< keys of one piece at least (one piece below twice this)
};

/// One tile of the pass: members [member_begin, member_begin + member_count) of group `group`
/// (positions in its seqs), KV head `kv_head`, keys [kv_begin, kv_end) of piece `piece`.
struct prefix_tile {
  int32_t group = 0, kv_head = 0, piece = 0, kv_begin = 0, kv_end = 0, member_begin = 0, member_count = 0;
};

/// Members of a group per tile at most.
int32_t members_per_tile(const prefix_tiling& t);

/// Pieces each group's prefix (num_prefix_blocks x block_size keys) is cut into: as many as
/// bring the groups' tiles up to a wave, at most max_pieces and prefix / min_piece_keys, at
/// least 1.
std::vector<int32_t> prefix_pieces(const cascade_plan& plan, int32_t block_size, const prefix_tiling& t);

/// The tiles: group by group, KV head by KV head, piece by piece, the members spread evenly over
/// ceil(members / members_per_tile) tiles. A group with 0 pieces gets none.
std::vector<prefix_tile> prefix_tiles(const cascade_plan& plan, int32_t block_size, std::span<const int32_t> pieces,
                                      const prefix_tiling& t);

}  // namespace actorserve::gpu
