// Cascade attention's planner, directly: groups of decodes whose block tables start alike,
// partial overlaps, n > 1 forks, sequences left alone, and the byte rule's thresholds.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "gpu/attention/cascade_plan.hpp"

namespace actorserve::testing {
namespace {

using gpu::cascade_costs;
using gpu::cascade_input;
using gpu::cascade_plan;

constexpr int32_t bs = 16;
/// Llama-3-8B's shape in bf16: 8 KV heads x 128 x 2 bytes for K and V; 32 query heads' fp32
/// output rows and log-sum-exps written and read back.
constexpr cascade_costs llama8b{2 * 8 * 128 * 2, 2 * 32 * (128 + 1) * 4};

/// Block ids [first, first + n).
std::vector<int32_t> ids(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The step's sequences: block tables and how many keys each has before the step.
struct step {
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> computed, fresh;

  /// A decode over `table`, its first `num_computed` keys in the cache.
  step& decode(std::vector<int32_t> table, int32_t num_computed) {
    tables.push_back(std::move(table));
    computed.push_back(num_computed);
    fresh.push_back(1);
    return *this;
  }
  /// A decode whose cached keys fill every block but the last (one free slot there).
  step& decode(std::vector<int32_t> table) {
    const auto n = static_cast<int32_t>(table.size()) * bs - 1;
    return decode(std::move(table), n);
  }
  step& prefill(std::vector<int32_t> table, int32_t num_computed, int32_t num_new) {
    tables.push_back(std::move(table));
    computed.push_back(num_computed);
    fresh.push_back(num_new);
    return *this;
  }
  cascade_plan plan(const cascade_costs& costs = llama8b) const {
    std::vector<cascade_input> in;
    for (size_t i = 0; i < tables.size(); ++i) in.push_back({tables[i], computed[i], fresh[i]});
    return gpu::plan_cascade(in, bs, costs);
  }
};

using members = std::vector<int32_t>;

TEST(cascade_plan, decodes_behind_one_system_prompt_form_one_group) {
  // 8 streams behind 40 blocks with 3 of their own; 1024 behind 4096 tokens with 40 of their own.
  struct shape {
    int32_t streams, shared, own;
  };
  for (const shape& c : {shape{8, 40, 3}, shape{1024, 256, 40}}) {
    step s;
    for (int32_t i = 0; i < c.streams; ++i) s.decode(cat(ids(0, c.shared), ids(100000 + c.own * i, c.own)));
    const cascade_plan p = s.plan();
    ASSERT_EQ(p.groups.size(), 1u) << c.streams;
    EXPECT_EQ(p.groups[0].num_prefix_blocks, c.shared);
    members all(static_cast<size_t>(c.streams));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(p.groups[0].seqs, all);
    EXPECT_EQ(p.num_grouped(), c.streams);
    for (int32_t g : p.group_of) EXPECT_EQ(g, 0);
  }
}

TEST(cascade_plan, the_prefix_is_the_longest_one_the_whole_group_shares) {
  step s;
  s.decode(cat(ids(0, 20), ids(50, 4)));   // shares 20 blocks with the others,
  s.decode(cat(ids(0, 24), ids(60, 2)));   // which share 24 between them
  s.decode(cat(ids(0, 24), ids(70, 2)));
  const cascade_plan p = s.plan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 20) << "a group of three over 20 blocks saves more than two over 24";
  EXPECT_EQ(p.groups[0].seqs, (members{0, 1, 2}));
}

TEST(cascade_plan, partial_overlaps_split_where_longer_private_prefixes_save_more) {
  // A and B share 30 blocks; C and D share the same first 17, then 13 blocks of their own.
  step s;
  s.decode(cat(ids(0, 30), {200}));                      // A
  s.decode(cat(cat(ids(0, 17), ids(100, 13)), {201}));   // C
  s.decode(cat(ids(0, 30), {202}));                      // B
  s.decode(cat(cat(ids(0, 17), ids(100, 13)), {203}));   // D
  const cascade_plan p = s.plan();
  // All four over 17 blocks would save 3 x 17 = 51 block reads; two pairs over 30 save 60.
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].seqs, (members{0, 2}));
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 30);
  EXPECT_EQ(p.groups[1].seqs, (members{1, 3}));
  EXPECT_EQ(p.groups[1].num_prefix_blocks, 30);
  EXPECT_EQ(p.group_of, (members{0, 1, 0, 1}));
}

TEST(cascade_plan, partial_overlaps_join_where_the_common_part_saves_more) {
  // Five sequences share 17 blocks; two of them share 30. One group of five over 17 blocks saves
  // 4 x 17 = 68 block reads, the pair over 30 alone 30: the five stay together.
  step s;
  s.decode(cat(ids(0, 30), {200}));
  s.decode(cat(ids(0, 30), {201}));
  for (int32_t i = 0; i < 3; ++i) s.decode(cat(cat(ids(0, 17), ids(100 + 20 * i, 13)), {210 + i}));
  const cascade_plan p = s.plan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 17);
  EXPECT_EQ(p.groups[0].seqs, (members{0, 1, 2, 3, 4}));
}

TEST(cascade_plan, forks_of_one_prompt_share_its_full_blocks_only) {
  // n = 4 samples of a 325-token prompt: 20 full blocks shared, the half-full 21st copied on
  // write into each sample's own block.
  step forked;
  for (int32_t i = 0; i < 4; ++i) forked.decode(cat(ids(0, 20), {300 + i}), 325 + 3);
  cascade_plan p = forked.plan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 20);
  EXPECT_EQ(p.groups[0].seqs, (members{0, 1, 2, 3}));
  // Tables that still hold the same half-full block: it is not part of the prefix (its keys are
  // not all in the cache before the step).
  step same;
  for (int32_t i = 0; i < 4; ++i) same.decode(ids(0, 21), 325);
  p = same.plan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 20);
}

TEST(cascade_plan, sequences_sharing_nothing_or_prefilling_stay_alone) {
  step s;
  for (int32_t i = 0; i < 3; ++i) s.decode(cat(ids(0, 20), {100 + i}));
  s.decode(cat(ids(500, 20), {104}));          // other blocks altogether
  s.prefill(cat(ids(0, 20), {105}), 320, 7);   // a prefill chunk after the same prefix
  s.decode(cat({0}, ids(600, 20)));            // shares one block only
  s.decode(ids(0, 20), 290);                   // its cached keys fill 18 of the shared blocks
  const cascade_plan p = s.plan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].seqs, (members{0, 1, 2, 6}));
  EXPECT_EQ(p.groups[0].num_prefix_blocks, 290 / bs) << "four over 18 blocks save more than three over 20";
  EXPECT_EQ(p.group_of, (members{0, 0, 0, -1, -1, -1, 0}));
}

TEST(cascade_plan, a_pair_over_64_tokens_is_not_worth_a_pass) {
  step s;
  s.decode(cat(ids(0, 4), {10})).decode(cat(ids(0, 4), {11}));
  EXPECT_TRUE(s.plan().empty());
  EXPECT_FALSE(gpu::cascade_pays(2, 64, llama8b));
  EXPECT_TRUE(step().decode(ids(0, 30)).plan().empty()) << "one sequence has nothing to share";
}

TEST(cascade_plan, the_prefix_floor_is_whole_blocks_of_at_least_the_minimum) {
  constexpr int32_t floor_blocks = gpu::cascade_min_prefix_tokens / bs;
  auto three_over = [](int32_t blocks) {
    step s;
    s.decode(cat(ids(0, blocks), {900})).decode(cat(ids(0, blocks), {901})).decode(cat(ids(0, blocks), {902}));
    return s.plan();
  };
  EXPECT_TRUE(three_over(floor_blocks - 1).empty());
  const cascade_plan p = three_over(floor_blocks);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].num_prefix_blocks, floor_blocks);
  EXPECT_FALSE(gpu::cascade_pays(3, gpu::cascade_min_prefix_tokens - 1, llama8b));
  EXPECT_TRUE(gpu::cascade_pays(3, gpu::cascade_min_prefix_tokens, llama8b));
}

TEST(cascade_plan, the_byte_ratio_decides_at_its_threshold) {
  // Per sequence: g x P x kv; cascade: P x kv + g x merge. With kv = 1 and P = 256, a pair reads
  // 512 against 256 + 2 x merge: exactly the ratio at merge = (512 / ratio - 256) / 2.
  const double ratio = gpu::cascade_min_byte_ratio;
  const auto at = static_cast<int64_t>((512.0 / ratio - 256.0) / 2.0);
  const cascade_costs even{1, at}, dearer{1, at + 1};
  EXPECT_GE(static_cast<double>(gpu::per_sequence_prefix_bytes(2, 256, even)),
            ratio * static_cast<double>(gpu::cascade_prefix_bytes(2, 256, even)));
  EXPECT_TRUE(gpu::cascade_pays(2, 256, even));
  EXPECT_FALSE(gpu::cascade_pays(2, 256, dearer));
  EXPECT_TRUE(gpu::cascade_pays(3, 256, dearer)) << "a third sequence pays for the merge";
  // The planner follows the rule: the pair takes the pass under `even`, not under `dearer`.
  step s;
  s.decode(cat(ids(0, 16), {50})).decode(cat(ids(0, 16), {51}));
  EXPECT_EQ(s.plan(even).groups.size(), 1u);
  EXPECT_TRUE(s.plan(dearer).empty());
  // A long prefix: the pair's ratio approaches 2.
  EXPECT_TRUE(gpu::cascade_pays(2, 4096, llama8b));
}

TEST(cascade_plan, the_groups_do_not_depend_on_the_batch_order) {
  std::mt19937 rng(7);
  step s;
  for (int32_t i = 0; i < 40; ++i) {
    const int32_t family = static_cast<int32_t>(rng() % 4);
    const int32_t shared = 16 + static_cast<int32_t>(rng() % 20);
    s.decode(cat(ids(1000 * family, shared), ids(100000 + 100 * i, 1 + static_cast<int32_t>(rng() % 3))));
  }
  const cascade_plan p = s.plan();
  ASSERT_FALSE(p.empty());
  std::vector<size_t> perm(s.tables.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  step shuffled;
  for (size_t i : perm) shuffled.decode(s.tables[i], s.computed[i]);
  const cascade_plan q = shuffled.plan();
  ASSERT_EQ(q.groups.size(), p.groups.size());
  // Same partition: two sequences share a group in one plan exactly when they do in the other,
  // with the same prefix.
  for (size_t a = 0; a < perm.size(); ++a)
    for (size_t b = 0; b < perm.size(); ++b) {
      const int32_t ga = q.group_of[a], gb = q.group_of[b];
      const int32_t pa = p.group_of[perm[a]], pb = p.group_of[perm[b]];
      EXPECT_EQ(ga >= 0 && ga == gb, pa >= 0 && pa == pb);
      if (ga >= 0) {
        EXPECT_EQ(q.groups[static_cast<size_t>(ga)].num_prefix_blocks,
                  p.groups[static_cast<size_t>(pa)].num_prefix_blocks);
      }
    }
  // Every group shares its prefix, and no sequence is in two groups.
  std::vector<int32_t> seen(s.tables.size(), 0);
  for (const auto& g : p.groups)
    for (int32_t m : g.seqs) {
      ++seen[static_cast<size_t>(m)];
      const auto& t = s.tables[static_cast<size_t>(m)];
      const auto& first = s.tables[static_cast<size_t>(g.seqs.front())];
      EXPECT_TRUE(std::equal(t.begin(), t.begin() + g.num_prefix_blocks, first.begin()));
    }
  for (int32_t c : seen) EXPECT_LE(c, 1);
}

}  // namespace
}  // namespace actorserve::testing
