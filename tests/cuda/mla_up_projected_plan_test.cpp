// Host-side tests of the up-projected prefill's plan (gpu/cuda/mla/up_projected_plan.hpp): which
// chunks share a gather of their contexts, and which launches and CTAs cover their queries. No
// GPU needed.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "gpu/cuda/mla/up_projected_plan.hpp"

namespace actorserve::testing {
namespace {

using gpu::cuda::attn_seq;
using gpu::cuda::mla_up_projected_group;
using gpu::cuda::mla_up_projected_launch;
using gpu::cuda::mla_up_projected_piece;
using gpu::cuda::mla_up_projected_rows;
using gpu::cuda::plan_up_projected;

/// Sequences in row order from (q_len, context) pairs.
std::vector<attn_seq> chunks(const std::vector<std::pair<int, int>>& shapes) {
  std::vector<attn_seq> seqs;
  int row = 0;
  for (const auto& [q_len, context] : shapes) {
    seqs.push_back({.q_start = row, .q_len = q_len, .context_len = context, .bt_offset = 0});
    row += q_len;
  }
  return seqs;
}

/// Keys the last query of an item sees.
int item_keys(const mla_up_projected_launch& l, gpu::cuda::mla_up_projected_item item) {
  const mla_up_projected_piece& p = l.pieces[item.piece];
  const int end = std::min(item.tile * mla_up_projected_rows + mla_up_projected_rows, p.queries);
  return p.context - p.queries + end;
}

/// Checks what every plan must hold and returns, per query row, the (kv_row, keys) it attends
/// with; each row is covered by exactly one CTA.
std::map<int, std::pair<int, int>> covered_rows(const std::vector<attn_seq>& seqs,
                                                const std::vector<mla_up_projected_group>& groups, int tokens) {
  std::map<int, std::pair<int, int>> rows;
  int next_seq = 0;
  for (const mla_up_projected_group& g : groups) {
    EXPECT_EQ(g.first, next_seq) << "groups are consecutive";
    int context = 0;
    for (size_t i = 0; i < g.kv_rows.size(); ++i) {
      EXPECT_EQ(g.kv_rows[i], context) << "contexts one after another";
      context += seqs[size_t(g.first) + i].context_len;
    }
    next_seq += int(g.kv_rows.size());
    EXPECT_EQ(g.context_rows, context);
    EXPECT_LE(g.context_rows, tokens);
    for (const mla_up_projected_launch& l : g.launches) {
      EXPECT_GE(l.num_pieces, 1);
      EXPECT_LE(l.num_pieces, gpu::cuda::mla_up_projected_max_pieces);
      EXPECT_LE(l.num_items, gpu::cuda::mla_up_projected_max_items);
      for (int i = 1; i < l.num_items; ++i)
        EXPECT_GE(item_keys(l, l.items[i - 1]), item_keys(l, l.items[i])) << "longest first";
      for (int i = 0; i < l.num_items; ++i) {
        const mla_up_projected_piece& p = l.pieces[l.items[i].piece];
        const int q0 = l.items[i].tile * mla_up_projected_rows;
        EXPECT_LT(q0, p.queries);
        for (int r = q0; r < std::min(q0 + mla_up_projected_rows, p.queries); ++r) {
          const int position = p.context - p.queries + r;
          EXPECT_TRUE(rows.emplace(p.q_row + r, std::pair{p.kv_row, position + 1}).second) << "row " << p.q_row + r;
        }
      }
    }
  }
  EXPECT_EQ(next_seq, int(seqs.size()));
  return rows;
}

TEST(MlaUpProjectedPlan, PromptsShareGroupsWhileTheirContextsFit) {
  // 45 prompts of 1,000 tokens, the workspace of V2-Lite's 16 heads: 16 a group.
  const int tokens = gpu::cuda::mla_prefill_workspace_tokens(16, 8192);
  EXPECT_EQ(tokens, 16384);
  const std::vector<attn_seq> seqs = chunks(std::vector<std::pair<int, int>>(45, {1000, 1000}));
  const auto groups = plan_up_projected(seqs, tokens);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].kv_rows.size(), 16u);
  EXPECT_EQ(groups[2].kv_rows.size(), 13u);
  for (const mla_up_projected_group& g : groups) {
    ASSERT_EQ(g.launches.size(), 1u);
    EXPECT_EQ(g.launches[0].num_items, int(g.kv_rows.size()) * 8);  // 1,000 queries: 8 tiles of 128
  }
  const auto rows = covered_rows(seqs, groups, tokens);
  ASSERT_EQ(rows.size(), 45000u);
  // Row 17,005: prompt 17 (the second of group 1, whose contexts start at row 1,000), position 5.
  EXPECT_EQ(rows.at(17005), (std::pair{1000, 6}));
}

TEST(MlaUpProjectedPlan, ChunksAfterACachedPrefixSeeTheirWholeContext) {
  // A 300-token chunk after 4,700 cached tokens, a decode-sized chunk, a new prompt.
  const std::vector<attn_seq> seqs = chunks({{300, 5000}, {2, 90}, {130, 130}});
  const auto groups = plan_up_projected(seqs, 8192);
  ASSERT_EQ(groups.size(), 1u);
  const auto rows = covered_rows(seqs, groups, 8192);
  ASSERT_EQ(rows.size(), 432u);
  EXPECT_EQ(rows.at(0), (std::pair{0, 4701}));
  EXPECT_EQ(rows.at(299), (std::pair{0, 5000}));
  EXPECT_EQ(rows.at(301), (std::pair{5000, 90}));
  EXPECT_EQ(rows.at(302), (std::pair{5090, 1}));
  EXPECT_EQ(rows.at(431), (std::pair{5090, 130}));
}

TEST(MlaUpProjectedPlan, LaunchLimitsCutLongChunksAndManySequences) {
  // 40,000 queries: 313 tiles, more than one launch's 256 CTAs: two pieces, the first of 256 x 128.
  std::vector<attn_seq> seqs = chunks({{40000, 40000}});
  auto groups = plan_up_projected(seqs, 40000);
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].launches.size(), 2u);
  EXPECT_EQ(groups[0].launches[0].pieces[0].queries, 256 * 128);
  EXPECT_EQ(groups[0].launches[0].pieces[0].context, 256 * 128);
  EXPECT_EQ(groups[0].launches[1].pieces[0].q_row, 256 * 128);
  EXPECT_EQ(groups[0].launches[1].pieces[0].context, 40000);
  EXPECT_EQ(covered_rows(seqs, groups, 40000).size(), 40000u);
  // 20 short chunks in one group: 16 pieces a launch.
  seqs = chunks(std::vector<std::pair<int, int>>(20, {10, 50}));
  groups = plan_up_projected(seqs, 1000);
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].launches.size(), 2u);
  EXPECT_EQ(groups[0].launches[0].num_pieces, 16);
  EXPECT_EQ(groups[0].launches[1].num_pieces, 4);
  EXPECT_EQ(covered_rows(seqs, groups, 1000).size(), 200u);
}

TEST(MlaUpProjectedPlan, LongestTilesFirstAcrossPieces) {
  const std::vector<attn_seq> seqs = chunks({{200, 200}, {300, 1000}});
  const auto groups = plan_up_projected(seqs, 2000);
  ASSERT_EQ(groups.size(), 1u);
  const mla_up_projected_launch& l = groups[0].launches.at(0);
  ASSERT_EQ(l.num_items, 2 + 3);
  // The second chunk's tiles (keys 1,000, 956, 828) before the first's (200, 128).
  EXPECT_EQ(item_keys(l, l.items[0]), 1000);
  EXPECT_EQ(item_keys(l, l.items[2]), 828);
  EXPECT_EQ(item_keys(l, l.items[3]), 200);
  EXPECT_EQ(item_keys(l, l.items[4]), 128);
}

TEST(MlaUpProjectedPlan, ContextPastTheWorkspaceOrNoQueries) {
  EXPECT_TRUE(plan_up_projected(chunks({{10, 10}, {5, 2000}}), 1999).empty());
  // A sequence without queries keeps its place in the group but takes no CTA.
  const auto groups = plan_up_projected(chunks({{0, 40}, {3, 3}}), 100);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kv_rows.size(), 2u);
  ASSERT_EQ(groups[0].launches.size(), 1u);
  EXPECT_EQ(groups[0].launches[0].num_items, 1);
  EXPECT_EQ(groups[0].launches[0].pieces[0].kv_row, 40);
  // The workspace of V2's 128 heads is --max-model-len's once that exceeds 2,048 tokens.
  EXPECT_EQ(gpu::cuda::mla_prefill_workspace_tokens(128, 1024), 2048);
  EXPECT_EQ(gpu::cuda::mla_prefill_workspace_tokens(128, 163840), 163840);
}

}  // namespace
}  // namespace actorserve::testing
