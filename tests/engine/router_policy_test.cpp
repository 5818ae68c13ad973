// The front end's routing policy, driven directly: cache-aware routing follows the longest
// prefix the engines were sent unless the load margin says otherwise; least-loaded and
// round-robin; engines going down and coming back.
#include <gtest/gtest.h>

#include "actors/block_hash.hpp"
#include "actors/router_policy.hpp"

namespace actorserve::actors {
namespace {

constexpr int32_t block = 16;

std::vector<uint64_t> keys_of(int32_t num_blocks, int32_t salt, int32_t shared_blocks = 0) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < num_blocks * block; ++i)
    tokens.push_back(i < shared_blocks * block ? 100 + i : 5000 + salt * 1000 + i);
  std::vector<uint64_t> h;
  extend_block_hashes(h, tokens, block);
  return h;
}

router_policy policy(routing_kind kind, size_t engines, int64_t margin = 4) {
  router_config c;
  c.kind = kind;
  c.balance_margin = margin;
  router_policy p(engines, c);
  for (size_t e = 0; e < engines; ++e) p.set_up(e, true);
  return p;
}

TEST(router_policy, cache_aware_sends_a_shared_prefix_where_it_went_before) {
  auto p = policy(routing_kind::cache_aware, 4);
  const auto first = keys_of(8, 1, 6);
  const auto e = p.pick(first);
  ASSERT_TRUE(e);
  p.on_routed(*e, first);
  // Other prompts (no shared prefix) spread over the other engines by load.
  for (int i = 0; i < 3; ++i) {
    const auto other = keys_of(4, 10 + i);
    const auto o = p.pick(other);
    ASSERT_TRUE(o);
    EXPECT_NE(*o, *e) << "a prompt that matches nowhere goes to the least-loaded engine";
    p.on_routed(*o, other);
  }
  const auto second = keys_of(8, 2, 6);  // the same 6-block prefix, another tail
  EXPECT_EQ(p.match(*e, second), 6u);
  EXPECT_EQ(p.pick(second), e);
}

TEST(router_policy, cache_aware_gives_way_to_the_least_loaded_beyond_the_margin) {
  auto p = policy(routing_kind::cache_aware, 2, /*margin=*/3);
  const auto prefix = keys_of(4, 0, 4);
  p.on_routed(0, prefix);
  for (int i = 0; i < 3; ++i) p.on_routed(0, keys_of(2, 20 + i));
  EXPECT_EQ(p.load(0), 4);
  EXPECT_EQ(p.pick(prefix), 1u) << "4 > 0 + 3: the least-loaded engine wins";
}

TEST(router_policy, the_margin_is_exceeded_only_past_it) {
  auto p = policy(routing_kind::cache_aware, 2, /*margin=*/3);
  const auto prefix = keys_of(4, 0, 4);
  p.on_routed(0, prefix);
  p.on_routed(0, keys_of(2, 30));
  p.on_routed(0, keys_of(2, 31));
  EXPECT_EQ(p.load(0), 3);
  EXPECT_EQ(p.pick(prefix), 0u) << "3 <= 0 + 3: the cache wins";
  p.on_routed(0, keys_of(2, 32));
  EXPECT_EQ(p.pick(prefix), 1u) << "4 > 0 + 3: the least-loaded engine wins";
  p.on_finished(0);
  p.on_finished(0);
  p.report_load(0, 2, 0);  // the engine's report catches up with the two that finished
  EXPECT_EQ(p.load(0), 2);
  EXPECT_EQ(p.pick(prefix), 0u);
}

TEST(router_policy, reported_load_counts_other_front_ends_requests) {
  auto p = policy(routing_kind::least_loaded, 3);
  p.report_load(0, 10, 1000);
  p.report_load(1, 2, 1000);
  p.report_load(2, 5, 1000);
  EXPECT_EQ(p.pick({}), 1u);
  p.on_routed(1, {});
  p.on_routed(1, {});
  p.on_routed(1, {});
  EXPECT_EQ(p.load(1), 5);
  p.report_load(1, 1, 1000);  // the report resets what was routed since the last one
  EXPECT_EQ(p.load(1), 3) << "this front end's own 3 outstanding requests still count";
}

TEST(router_policy, round_robin_skips_engines_that_are_down) {
  auto p = policy(routing_kind::round_robin, 3);
  p.set_up(1, false);
  std::vector<size_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*p.pick({}));
  EXPECT_EQ(got, (std::vector<size_t>{0, 2, 0, 2}));
  p.set_up(1, true);
  got.clear();
  for (int i = 0; i < 3; ++i) got.push_back(*p.pick({}));
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2}));
}

TEST(router_policy, an_engine_that_went_down_forgets_its_prefixes_and_load) {
  auto p = policy(routing_kind::cache_aware, 2);
  const auto prefix = keys_of(4, 0, 4);
  p.on_routed(1, prefix);
  p.set_up(1, false);
  EXPECT_EQ(p.pick(prefix), 0u);
  p.set_up(1, true);
  EXPECT_EQ(p.match(1, prefix), 0u);
  EXPECT_EQ(p.load(1), 0);
  p.set_up(0, false);
  p.set_up(1, false);
  EXPECT_FALSE(p.pick(prefix)) << "no engine is up";
}

TEST(router_policy, prefixes_are_forgotten_beyond_the_engines_pool_size) {
  auto p = policy(routing_kind::cache_aware, 2);
  p.report_load(0, 0, 8);  // a pool of 8 blocks
  const auto old_prefix = keys_of(4, 0, 4);
  p.on_routed(0, old_prefix);
  p.on_routed(0, keys_of(8, 40));
  EXPECT_EQ(p.match(0, old_prefix), 0u) << "evicted, least recently routed first";
}

}  // namespace
}  // namespace actorserve::actors
