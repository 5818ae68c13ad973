// Host-side tests of the decode split heuristics and of the backend's start-up checks: no GPU
// needed (these run in CI). Expected chunks are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/attention/split_heuristic.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::testing {
namespace {

using gpu::cuda::choose_kv_chunk;
using gpu::cuda::decode_ctas;
using gpu::cuda::split_inputs;

/// An H200-like device: 132 SMs, 2 resident decode CTAs each (264 slots), KVH 8.
split_inputs h200(int max_partials = 528) {
  split_inputs in;
  in.num_kv_heads = 8;
  in.num_sms = 132;
  in.ctas_per_sm = 2;
  in.tile = 64;
  in.min_chunk = 128;
  in.max_partials = max_partials;
  return in;
}

TEST(SplitHeuristic, NoSplitOnceTheBatchFillsAWave) {
  // 33 x 8 = 264 CTAs = 264 slots; 256 x 8 = 2048 CTAs: already several waves.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(33, 8192), h200()), 0);
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(256, 2048), h200()), 0);
}

TEST(SplitHeuristic, SingleLongSequenceFillsOneWave) {
  // 8 x ceil(32768 / c) <= 264  =>  ceil <= 33  =>  c >= 993.0  =>  1024 (a multiple of 64).
  const std::vector<int32_t> lens = {32768};
  EXPECT_EQ(choose_kv_chunk(lens, h200()), 1024);
  EXPECT_EQ(decode_ctas(lens, 8, 1024), 256);
}

TEST(SplitHeuristic, SmallBatchSplitsToFourPieces) {
  // 8 x 8 x ceil(2048 / c) <= 264  =>  ceil <= 4  =>  c = 512.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(8, 2048), h200()), 512);
  // 32 x 8 = 256 CTAs: one more piece each would be 512 > 264, so no split.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(32, 2048), h200()), 0);
}

TEST(SplitHeuristic, ShortContextsAreNotSplitBelowMinChunk) {
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{100}, h200()), 0);   // under one min chunk
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{128}, h200()), 0);
}

TEST(SplitHeuristic, ShortSingleContextsSplitIntoUpToEightTiles) {
  // Floor min(128, ceil(len / 8)) rounded up to the 64-token tile, then the smallest chunk that
  // fits one wave (always the floor here: at most 8 x 8 = 64 CTAs).
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{200}, h200()), 64);   // ceil(200 / 8) = 25 -> 64
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{256}, h200()), 64);   // 4 pieces, 32 CTAs
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{512}, h200()), 64);   // 8 pieces, 64 CTAs
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{1000}, h200()), 128); // ceil(1000 / 8) = 125 -> 128
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{2048}, h200()), 128); // floor stays min_chunk
  // short_pieces 1 restores pieces of at least min_chunk: 2 x 128 for 256 tokens.
  split_inputs old = h200();
  old.short_pieces = 1;
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{256}, old), 128);
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{200}, old), 128);
}

TEST(SplitHeuristic, MixedLengthsGiveLongSequencesMorePieces) {
  // ceil(8192 / c) + 3 <= 33  =>  c >= 273.07  =>  320 (256 would give 32 + 3 = 35 pieces).
  const std::vector<int32_t> lens = {8192, 64, 64, 64};
  EXPECT_EQ(choose_kv_chunk(lens, h200()), 320);
  EXPECT_EQ(decode_ctas(lens, 8, 320), (26 + 3) * 8);
}

TEST(SplitHeuristic, PartialSlotsCapTheSplit) {
  // 8 x ceil(32768 / c) <= 64 partial slots  =>  ceil <= 8  =>  c = 4096.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{32768}, h200(64)), 4096);
  // Not even two pieces per head fit 8 slots: no split.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{32768}, h200(8)), 0);
}

TEST(SplitHeuristic, OccupancyScalesTheWave) {
  split_inputs in = h200(4096);
  in.ctas_per_sm = 4;  // 528 slots: 8 x ceil(32768 / c) <= 528  =>  ceil <= 66  =>  c >= 504.2  =>  512
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{32768}, in), 512);
}

TEST(SplitHeuristic, LongPiecesRunOneCtaPerSm) {
  // Flash-decoding's rule: the split sized for one CTA per SM (132 slots) when its pieces are
  // at least 2048 tokens, else the two-CTA split.
  split_inputs fd = h200();
  fd.long_piece_tokens = 2048;
  // 8 x ceil(32768 / c) <= 132  =>  ceil <= 16  =>  c = 2048: 16 pieces, 128 CTAs (was 1024, 256).
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{32768}, fd), 2048);
  EXPECT_EQ(decode_ctas(std::vector<int32_t>{32768}, 8, 2048), 128);
  // 8 x 8192: 64 x ceil(8192 / c) <= 132  =>  2 pieces of 4096 (was 4 of 2048).
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(8, 8192), fd), 4096);
  // 8 x 32768: 2 pieces of 16384.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(8, 32768), fd), 16384);
  // 1 x 16384 at one CTA per SM: 16 pieces of 1024, under 2048: the two-CTA split, 32 x 512.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{16384}, fd), 512);
  // Short contexts and full batches as before.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>{8192}, fd), 256);
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(8, 2048), fd), 512);
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(32, 2048), fd), 0);
  // 12 x 8192: at one CTA per SM not even two pieces fit (192 CTAs > 132), so the two-CTA
  // split: 96 x 2 = 192 <= 264, 2 pieces of 4096.
  EXPECT_EQ(choose_kv_chunk(std::vector<int32_t>(12, 8192), fd), 4096);
  EXPECT_EQ(decode_ctas(std::vector<int32_t>(12, 8192), 8, 4096), 192);
}

TEST(SplitHeuristic, ChoiceIsTheSmallestChunkThatFits) {
  // Property over random batches: the chosen chunk fits one wave and the partial slots, and one
  // tile less would not (or would go under the floor).
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> lens(1 + rng() % 40);
    for (auto& l : lens) l = 1 + int32_t(rng() % 40000);
    const split_inputs in = h200(256 + int(rng() % 1024));
    const int32_t c = choose_kv_chunk(lens, in);
    if (c == 0) continue;
    ASSERT_EQ(c % in.tile, 0);
    // The floor: min(min_chunk, ceil(longest / short_pieces)) rounded up to a tile.
    const int32_t longest = *std::max_element(lens.begin(), lens.end());
    const int32_t f = std::min(in.min_chunk, (longest + in.short_pieces - 1) / in.short_pieces);
    const int32_t floor_chunk = (f + in.tile - 1) / in.tile * in.tile;
    ASSERT_GE(c, floor_chunk);
    const int64_t slots = int64_t(in.num_sms) * in.ctas_per_sm;
    EXPECT_LE(decode_ctas(lens, in.num_kv_heads, c), slots);
    const int32_t smaller = c - in.tile;
    if (smaller >= floor_chunk) {
      int64_t parts = 0;
      for (int32_t l : lens)
        if (l > smaller) parts += (l + smaller - 1) / smaller * in.num_kv_heads;
      EXPECT_TRUE(decode_ctas(lens, in.num_kv_heads, smaller) > slots || parts > in.max_partials);
    }
  }
}

gpu::cuda::attention_shape shape(int D, int bs, int H = 32, int KVH = 8) {
  gpu::cuda::attention_shape s;
  s.num_heads = H;
  s.num_kv_heads = KVH;
  s.head_dim = D;
  s.block_size = bs;
  s.num_sms = 132;
  return s;
}

TEST(AttentionBackend, BlockSizeBelongsToTheBackend) {
  using gpu::cuda::make_attention_backend;
  for (int bs : {8, 16, 32}) {
    auto b = make_attention_backend(kv_cache_layout::vllm, shape(16, bs));
    ASSERT_TRUE(b) << bs;
    EXPECT_EQ((*b)->block_size(), bs);
  }
  for (int bs : {4, 64, 48}) {
    auto b = make_attention_backend(kv_cache_layout::vllm, shape(16, bs));
    ASSERT_FALSE(b) << bs;
    EXPECT_NE(b.err().message.find("--block-size"), std::string::npos);
  }
  for (int bs : {16, 32, 72, 512}) EXPECT_FALSE(make_attention_backend(kv_cache_layout::flash_decoding, shape(16, bs)));
  for (int bs : {64, 128, 256}) EXPECT_TRUE(make_attention_backend(kv_cache_layout::flash_decoding, shape(16, bs)));
}

TEST(AttentionBackend, HeadDimsWithoutTensorCoreBuildUseTheGenericKernel) {
  using gpu::cuda::make_attention_backend;
  auto b = make_attention_backend(kv_cache_layout::vllm, shape(16, 16, 4, 2));
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)->name(), "vllm (generic kernel)");
  EXPECT_EQ((*b)->block_bytes(), size_t(16) * 2 * 16 * 2);
  EXPECT_FALSE(make_attention_backend(kv_cache_layout::vllm, shape(100, 16)));   // not a multiple of 8
  EXPECT_FALSE(make_attention_backend(kv_cache_layout::vllm, shape(512, 16)));   // over 256
  EXPECT_FALSE(make_attention_backend(kv_cache_layout::vllm, shape(128, 16, 34, 2)));  // group of 17
  EXPECT_FALSE(make_attention_backend(kv_cache_layout::vllm, shape(128, 16, 30, 8)));  // 30 % 8 != 0
}

gpu::cuda::attn_seq decode(int32_t q_start, int32_t context_len) { return {q_start, 1, context_len, 0}; }

TEST(AttentionBackend, BothBackendsSplitASmallBatchOverTheSlots) {
  // The vllm backend now cuts its partitions with the occupancy heuristic too: one 32k decode
  // with 8 KV heads must be split into more than one piece per head on a 132-SM device.
  for (auto layout : {kv_cache_layout::vllm, kv_cache_layout::flash_decoding}) {
    auto b = gpu::cuda::make_attention_backend(layout, shape(128, layout == kv_cache_layout::vllm ? 16 : 64));
    ASSERT_TRUE(b);
    const std::vector<gpu::cuda::attn_seq> seqs = {decode(0, 32768)};
    const gpu::cuda::attention_plan p = (*b)->plan(seqs);
    ASSERT_EQ(p.combines.size(), 8u) << to_string(layout);
    const int splits = p.combines[0].num_splits;
    EXPECT_GE(splits, 2);
    EXPECT_LE(p.num_partials, (*b)->max_partials());
    EXPECT_EQ(p.num_decode_items, 8 * splits);
  }
}

TEST(AttentionBackend, SplitPiecesNameTheirCombineAndCoverTheKeysOnce) {
  // The decode kernel merges in-kernel through attn_item::pad (the combine index): every piece
  // of a combine must point at it, use its consecutive partial slots and tile [0, len) exactly.
  auto b = gpu::cuda::make_attention_backend(kv_cache_layout::flash_decoding, shape(128, 64));
  ASSERT_TRUE(b);
  const std::vector<gpu::cuda::attn_seq> seqs = {decode(0, 5000), decode(1, 17), decode(2, 1000)};
  const gpu::cuda::attention_plan p = (*b)->plan(seqs);
  ASSERT_FALSE(p.combines.empty());
  std::vector<int> seen(p.combines.size(), 0);
  std::vector<int32_t> end(p.combines.size(), 0);
  for (const auto& it : p.items) {
    if (it.partial < 0) continue;
    ASSERT_GE(it.pad, 0);
    ASSERT_LT(size_t(it.pad), p.combines.size());
    const auto& cb = p.combines[size_t(it.pad)];
    EXPECT_EQ(cb.kv_head, it.kv_head);
    EXPECT_EQ(cb.q_begin, it.q_begin);
    EXPECT_EQ(it.partial, cb.first_partial + seen[size_t(it.pad)]);
    const int32_t chunk = p.items[0].kv_end - p.items[0].kv_begin;
    EXPECT_EQ(it.kv_begin, end[size_t(it.pad)]);
    EXPECT_EQ(it.kv_begin, seen[size_t(it.pad)] * chunk);
    EXPECT_EQ(it.kv_end, std::min(it.kv_begin + chunk, seqs[size_t(it.seq)].context_len));
    end[size_t(it.pad)] = it.kv_end;
    ++seen[size_t(it.pad)];
  }
  for (size_t c = 0; c < p.combines.size(); ++c) EXPECT_EQ(seen[c], p.combines[c].num_splits) << c;
  EXPECT_EQ(end[0], 5000);
}

TEST(AttentionBackend, PrefillTilesCoverEveryQueryOnceLongestFirst) {
  // Causal tiles differ in work; the plan puts the longest key ranges first. Every (token, head)
  // row of a 300-token prompt and a 70-token chunk over a 1000-token prefix is in one tile.
  auto b = gpu::cuda::make_attention_backend(kv_cache_layout::flash_decoding, shape(128, 64));
  ASSERT_TRUE(b);
  const std::vector<gpu::cuda::attn_seq> seqs = {{0, 300, 300, 0}, {300, 70, 1070, 0}};
  const gpu::cuda::attention_plan p = (*b)->plan(seqs);
  EXPECT_EQ(p.num_decode_items, 0);
  std::vector<int> covered(370 * 8, 0);
  for (size_t i = 0; i < p.items.size(); ++i) {
    const auto& it = p.items[i];
    if (i > 0) {
      EXPECT_GE(p.items[i - 1].kv_end - p.items[i - 1].kv_begin, it.kv_end - it.kv_begin);
    }
    const auto& sq = seqs[size_t(it.seq)];
    EXPECT_EQ(it.kv_end, sq.context_len - sq.q_len + (it.q_begin - sq.q_start) + it.q_len);
    for (int t = it.q_begin; t < it.q_begin + it.q_len; ++t) ++covered[size_t(t) * 8 + size_t(it.kv_head)];
  }
  for (size_t i = 0; i < covered.size(); ++i) EXPECT_EQ(covered[i], 1) << i;
}

TEST(AttentionBackend, EveryItemCarriesItsSequencesBlockTableAndLength) {
  // The decode kernels read an item's block table through attn_item::bt_offset and its newest
  // key through attn_item::context_len, not through seqs[item.seq]: every planner must copy both,
  // for prefill tiles and for split and whole decode pieces, on every backend.
  const std::vector<gpu::cuda::attn_seq> seqs = {
      {0, 300, 300, 3}, {300, 70, 1070, 11}, {370, 1, 5000, 40}, {371, 1, 17, 120}, {372, 1, 1000, 77}};
  struct build {
    kv_cache_layout layout;
    int D, bs, H, KVH;
  };
  const build builds[] = {{kv_cache_layout::vllm, 128, 16, 32, 8},
                          {kv_cache_layout::flash_decoding, 128, 64, 32, 8},
                          {kv_cache_layout::vllm, 16, 16, 4, 2}};  // the last: the generic kernel
  for (const build& c : builds) {
    auto b = gpu::cuda::make_attention_backend(c.layout, shape(c.D, c.bs, c.H, c.KVH));
    ASSERT_TRUE(b);
    const gpu::cuda::attention_plan p = (*b)->plan(seqs);
    ASSERT_FALSE(p.items.empty()) << (*b)->name();
    if (c.D == 128) {  // the tensor-core backends plan decode pieces after the prefill tiles
      ASSERT_GT(p.num_decode_items, 0) << (*b)->name();
      ASSERT_LT(p.num_decode_items, int32_t(p.items.size())) << (*b)->name();
    }
    int split = 0;
    for (const auto& it : p.items) {
      const auto& sq = seqs[size_t(it.seq)];
      EXPECT_EQ(it.bt_offset, sq.bt_offset) << (*b)->name() << " seq " << it.seq;
      EXPECT_EQ(it.context_len, sq.context_len) << (*b)->name() << " seq " << it.seq;
      split += it.partial >= 0;
    }
    if (c.D == 128) {
      EXPECT_GT(split, 0) << (*b)->name();  // the 5000-token decode is cut into pieces
    }
  }
}

TEST(AttentionBackend, DecodePiecesGetTheBlockOfTheirFirstKey) {
  // The flash-decoding kernel issues a piece's first K/V copy from attn_item::first_block
  // without reading the table: each piece (split or whole) must name the block of kv_begin.
  const int bs = 64;
  const std::vector<gpu::cuda::attn_seq> seqs = {{0, 1, 5000, 0}, {1, 1, 17, 79}, {2, 1, 1000, 80}};
  std::vector<int32_t> tables(96);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t((i * 37 + 5) % 1000);  // no two alike
  auto b = gpu::cuda::make_attention_backend(kv_cache_layout::flash_decoding, shape(128, bs, 32, 8));
  ASSERT_TRUE(b);
  gpu::cuda::attention_plan p = (*b)->plan(seqs);
  ASSERT_EQ(p.num_decode_items, int32_t(p.items.size()));
  for (const auto& it : p.items) EXPECT_EQ(it.first_block, -1);  // the planner leaves them to the step
  gpu::cuda::set_first_blocks(p, tables, bs);
  int pieces_past_block_0 = 0;
  for (const auto& it : p.items) {
    const int32_t entry = seqs[size_t(it.seq)].bt_offset + it.kv_begin / bs;
    EXPECT_EQ(it.first_block, tables[size_t(entry)]) << "seq " << it.seq << " kv_begin " << it.kv_begin;
    pieces_past_block_0 += it.kv_begin >= bs;
  }
  EXPECT_GT(pieces_past_block_0, 0);  // the 5000-token sequence is split
  // An entry outside the tables given leaves the table read to the kernel; prefill tiles (the
  // items before the decode pieces) are not touched.
  gpu::cuda::attention_plan bad;
  bad.items.resize(2);
  bad.items[1].bt_offset = 95;
  bad.items[1].kv_begin = 2 * bs;
  bad.num_decode_items = 1;
  bad.items[1].first_block = 7;
  gpu::cuda::set_first_blocks(bad, tables, bs);
  EXPECT_EQ(bad.items[1].first_block, -1);
  EXPECT_EQ(bad.items[0].first_block, -1);  // bt_offset 0, kv_begin 0 would have named tables[0]
}

TEST(AttentionBackend, CascadeGroupsMapToPrefixRowsAndCombineSlots) {
  // A group of 20 decodes sharing 64 blocks (4096 keys) plus one decode alone, 32/8 heads at
  // 64-token blocks: every member and KV head gets one combine whose first slots its prefix
  // pieces fill (one row per member in exactly one item per piece, the pieces tiling [0, 4096))
  // and whose other slots its own pieces over [4096, context) fill; at most 128 rows an item (64
  // where the prefix pass runs on mma.sync).
  auto b = gpu::cuda::make_attention_backend(kv_cache_layout::flash_decoding, shape(128, 64, 32, 8));
  ASSERT_TRUE(b);
  ASSERT_TRUE((*b)->takes_cascade());
  const int KVH = 8, G = 4, P = 4096;
  std::vector<gpu::cuda::attn_seq> seqs;
  gpu::cascade_plan cascade;
  cascade.groups.push_back({P / 64, {}});
  for (int i = 0; i < 20; ++i) {
    seqs.push_back({i, 1, P + 1 + 50 * i, 100 * i});
    cascade.groups[0].seqs.push_back(i);
  }
  seqs.push_back({20, 1, 3000, 5000});
  const gpu::cuda::attention_plan p = (*b)->plan(seqs, cascade);
  EXPECT_EQ(p.cascade_seqs, 20);
  ASSERT_FALSE(p.prefix_items.empty());
  EXPECT_LE(p.num_partials, (*b)->partial_capacity(int(seqs.size())));
  EXPECT_LE(p.prefix_rows.size(), size_t((*b)->prefix_row_capacity(int(seqs.size()))));
  // slot -> (combine, piece index) and what filled it
  std::vector<int> filled(size_t(p.num_partials), 0);
  std::vector<int32_t> slot_begin(size_t(p.num_partials), -1), slot_end(size_t(p.num_partials), -1);
  for (const auto& it : p.prefix_items) {
    EXPECT_LE(it.q_len * G, gpu::cuda::cascade_prefix_wgmma_rows);
    EXPECT_EQ(it.bt_offset, 0) << "the group's first member's table";
    for (int m = 0; m < it.q_len; ++m) {
      const auto& row = p.prefix_rows[size_t(it.q_begin + m)];
      ASSERT_GE(row.partial, 0);
      ASSERT_LT(row.partial, p.num_partials);
      ++filled[size_t(row.partial)];
      slot_begin[size_t(row.partial)] = it.kv_begin;
      slot_end[size_t(row.partial)] = it.kv_end;
    }
  }
  for (const auto& it : p.items) {
    if (it.partial < 0) continue;
    ++filled[size_t(it.partial)];
    slot_begin[size_t(it.partial)] = it.kv_begin;
    slot_end[size_t(it.partial)] = it.kv_end;
  }
  for (int f : filled) EXPECT_EQ(f, 1);
  int member_combines = 0;
  for (const auto& cb : p.combines) {
    const int s = cb.q_begin;  // q_start == index here
    int32_t next = 0;
    for (int k = 0; k < cb.num_splits; ++k) {
      const size_t slot = size_t(cb.first_partial + k);
      EXPECT_EQ(slot_begin[slot], next) << "seq " << s << " head " << cb.kv_head << " piece " << k;
      next = slot_end[slot];
    }
    EXPECT_EQ(next, seqs[size_t(s)].context_len) << "seq " << s;
    member_combines += s < 20;
  }
  EXPECT_EQ(member_combines, 20 * KVH);
  // Without the group the same step has no prefix pieces.
  const gpu::cuda::attention_plan plain = (*b)->plan(seqs);
  EXPECT_TRUE(plain.prefix_items.empty());
  EXPECT_EQ(plain.cascade_seqs, 0);
  // The vllm backend does not take cascade groups.
  auto v = gpu::cuda::make_attention_backend(kv_cache_layout::vllm, shape(128, 16, 32, 8));
  ASSERT_TRUE(v);
  EXPECT_FALSE((*v)->takes_cascade());
  EXPECT_TRUE((*v)->plan(seqs, cascade).prefix_items.empty());
}

TEST(AttentionBackend, WindowedItemsStartAtTheTileOfTheirFirstKey) {
  // A 150-key window: a 5000-key decode reads [4850, 5000) from the tile at 4800, cut into
  // 64-key pieces that cover [4800, 5000) once (the first holding the window's first key); a
  // 70-token chunk over 1000 cached keys starts each item at the tile of its first query's
  // window; cascade groups are not taken (members' queries do not see the whole prefix).
  for (auto layout : {kv_cache_layout::vllm, kv_cache_layout::flash_decoding}) {
    auto sh = shape(128, layout == kv_cache_layout::vllm ? 16 : 64);
    sh.window = 150;
    auto b = gpu::cuda::make_attention_backend(layout, sh);
    ASSERT_TRUE(b);
    EXPECT_FALSE((*b)->takes_cascade());
    const std::vector<gpu::cuda::attn_seq> seqs = {decode(0, 5000), {1, 70, 1070, 100}, decode(71, 100)};
    gpu::cascade_plan cascade;
    cascade.groups.push_back({1, {0, 2}});
    const gpu::cuda::attention_plan p = (*b)->plan(seqs, cascade);
    EXPECT_TRUE(p.prefix_items.empty());
    std::vector<int32_t> covered(2 * 8, 0);  // decode keys read per (decode, KV head)
    for (const auto& it : p.items) {
      EXPECT_EQ(it.kv_begin % 64, 0);
      if (it.seq == 1) {
        const int32_t first_pos = 1000 + (it.q_begin - 1);
        EXPECT_EQ(it.kv_begin, (first_pos - 150 + 1) / 64 * 64);
        continue;
      }
      EXPECT_GE(it.kv_begin, it.seq == 0 ? 4800 : 0);  // 100 keys: all within the window
      covered[size_t(it.seq / 2 * 8 + it.kv_head)] += it.kv_end - it.kv_begin;
    }
    for (size_t i = 0; i < covered.size(); ++i) EXPECT_EQ(covered[i], i < 8 ? 200 : 100) << to_string(layout);
  }
}

TEST(AttentionBackend, GenericPlanCutsTheWindowedRange) {
  // The generic kernel's pieces tile [kv_begin, kv_end) of a windowed item, from a 32-key chunk.
  const std::vector<gpu::cuda::attn_seq> seqs = {decode(0, 5000)};
  const auto p = gpu::cuda::plan_attention(seqs, 32, 8, 264, 4096, 700);
  ASSERT_FALSE(p.combines.empty());
  std::vector<int32_t> covered(8, 0);
  for (const auto& it : p.items) {
    EXPECT_GE(it.kv_begin, (5000 - 700) / 32 * 32);
    covered[size_t(it.kv_head)] += it.kv_end - it.kv_begin;
  }
  for (int32_t c : covered) EXPECT_EQ(c, 5000 - (5000 - 700) / 32 * 32);
}

}  // namespace
}  // namespace actorserve::testing
