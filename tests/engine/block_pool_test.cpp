// The block pool policy on its own: reference counts, prefix hits, eviction order, copy-on-write,
// all-or-nothing grants and the idle invariant free + cached == total.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "actors/block_hash.hpp"
#include "actors/block_pool.hpp"

namespace actorserve::actors {
namespace {

constexpr int32_t bs = 16;

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<uint64_t> hashes_of(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h;
  extend_block_hashes(h, tokens, bs);
  return h;
}

kv_item admit(uint64_t id, const std::vector<int32_t>& tokens, int32_t budget = 1 << 20) {
  kv_item it;
  it.seq_id = id;
  it.num_tokens = static_cast<int32_t>(tokens.size());
  it.num_new = std::min(budget, it.num_tokens);
  it.lookup = true;
  it.optional = true;
  it.new_hashes = hashes_of(tokens);
  return it;
}

kv_answer reserve(block_pool& pool, std::vector<kv_item> items, std::vector<kv_free> frees = {},
                  std::vector<kv_fork> forks = {}) {
  kv_reservation r;
  r.items = std::move(items);
  r.frees = std::move(frees);
  r.forks = std::move(forks);
  return pool.reserve(r);
}

TEST(block_pool, chained_hash_names_the_whole_prefix) {
  auto a = iota_tokens(32);
  auto b = a;
  b[0] = 7;  // first block differs, second block's tokens are equal
  const auto ha = hashes_of(a), hb = hashes_of(b);
  ASSERT_EQ(ha.size(), 2u);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]) << "equal tokens under a different parent must hash differently";
  EXPECT_EQ(hashes_of(iota_tokens(47)).size(), 2u) << "partial blocks are not hashed";
}

TEST(block_pool, grants_blocks_and_counts_references) {
  block_pool pool(10, bs, true);
  auto ans = reserve(pool, {admit(1, iota_tokens(40))});
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 1u);
  EXPECT_EQ(pool.table(ans.items[0].seq_id).size(), 3u);
  EXPECT_EQ(ans.items[0].num_computed, 0);
  EXPECT_EQ(ans.items[0].num_new, 40);
  for (int32_t b : pool.table(ans.items[0].seq_id)) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(ans.counts.used, 3);
  EXPECT_EQ(ans.counts.free + ans.counts.cached, 7);

  ans = reserve(pool, {}, {{1, 40}});
  EXPECT_EQ(ans.counts.used, 0);
  EXPECT_EQ(ans.counts.cached, 2) << "the two full computed blocks keep their keys";
  EXPECT_EQ(ans.counts.free + ans.counts.cached, 10);
}

TEST(block_pool, prefix_hits_skip_cached_blocks_and_leave_one_token) {
  block_pool pool(16, bs, true);
  const auto first = iota_tokens(48);
  ASSERT_TRUE(reserve(pool, {admit(1, first)}).granted);
  reserve(pool, {}, {{1, 48}});
  EXPECT_EQ(pool.counts().cached, 3);

  auto second = iota_tokens(40);
  second.resize(37);
  second[33] = 5;  // shares the first two full blocks
  auto ans = reserve(pool, {admit(2, second)});
  ASSERT_TRUE(ans.granted);
  EXPECT_EQ(ans.items[0].num_computed, 32);
  EXPECT_EQ(ans.items[0].num_cached, 32);
  EXPECT_EQ(ans.items[0].num_new, 5);
  EXPECT_EQ(ans.prefix_cache_hits, 32);
  EXPECT_EQ(ans.prefix_cache_queries, 37);

  // A request identical to the first still computes its last token (logits are needed).
  ans = reserve(pool, {admit(3, first)});
  ASSERT_TRUE(ans.granted);
  EXPECT_EQ(ans.items[0].num_computed, 32);
  EXPECT_EQ(ans.items[0].num_new, 16);
  EXPECT_EQ(ans.counts.shared, 2) << "seqs 2 and 3 share the first two blocks";
}

TEST(block_pool, prefix_caching_off_never_hits) {
  block_pool pool(16, bs, false);
  const auto t = iota_tokens(48);
  ASSERT_TRUE(reserve(pool, {admit(1, t)}).granted);
  reserve(pool, {}, {{1, 48}});
  EXPECT_EQ(pool.counts().cached, 0);
  auto ans = reserve(pool, {admit(2, t)});
  EXPECT_EQ(ans.items[0].num_computed, 0);
}

TEST(block_pool, eviction_takes_unkeyed_blocks_then_the_oldest_keys) {
  block_pool pool(6, bs, true);
  const auto a = iota_tokens(48);
  auto ans = reserve(pool, {admit(1, a)});
  const auto table_a = pool.table(ans.items[0].seq_id);
  reserve(pool, {}, {{1, 48}});
  // Free list: never-used blocks first, then A's blocks tail first (its prefix evicted last).
  const auto order = pool.free_list();
  ASSERT_EQ(order.size(), 6u);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(pool.is_cached(order[i]));
  EXPECT_EQ(order[3], table_a[2]);
  EXPECT_EQ(order[4], table_a[1]);
  EXPECT_EQ(order[5], table_a[0]);

  ans = reserve(pool, {admit(2, iota_tokens(52, 900))});  // 4 blocks: 3 unkeyed, then A's tail
  ASSERT_TRUE(ans.granted);
  EXPECT_EQ(pool.table(ans.items[0].seq_id)[3], table_a[2]);
  EXPECT_FALSE(pool.is_cached(table_a[2]));
  EXPECT_TRUE(pool.is_cached(table_a[1]));

  // Seq 2 leaves without computing anything (its blocks are unkeyed: first in line), and A's
  // prompt comes back: its first two blocks survived.
  ans = reserve(pool, {admit(3, a)}, {{2, 0}});
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 1u);
  EXPECT_EQ(ans.items[0].num_cached, 32);
  EXPECT_EQ(pool.table(ans.items[0].seq_id)[0], table_a[0]);
  EXPECT_EQ(pool.table(ans.items[0].seq_id)[1], table_a[1]);
}

TEST(block_pool, forks_share_blocks_and_copy_on_write) {
  block_pool pool(10, bs, true);
  const auto prompt = iota_tokens(21);
  kv_item parent = admit(1, prompt);
  parent.num_tokens = 20;  // a fork parent computes all but the last prompt token
  parent.num_new = 20;
  auto ans = reserve(pool, {parent});
  ASSERT_TRUE(ans.granted);
  const auto table = pool.table(ans.items[0].seq_id);
  ASSERT_EQ(table.size(), 2u);

  auto child = [&](uint64_t id) {
    kv_item it;
    it.seq_id = id;
    it.num_computed = 20;
    it.num_tokens = 21;
    it.num_new = 1;
    return it;
  };
  ans = reserve(pool, {child(2), child(3), child(4)}, {{1, 20}}, {{1, 2}, {1, 3}, {1, 4}});
  ASSERT_TRUE(ans.granted);
  EXPECT_EQ(pool.ref_count(table[0]), 3) << "the full prompt block stays shared";
  ASSERT_EQ(ans.copies.size(), 2u) << "two children copy the partial block, the last writes in place";
  EXPECT_EQ(ans.copies[0].first, table[1]);
  EXPECT_EQ(ans.copies[1].first, table[1]);
  EXPECT_EQ(pool.table(ans.items[2].seq_id)[1], table[1]);
  EXPECT_EQ(ans.items[0].table_from, 1) << "the grant names the replaced entry";
  EXPECT_EQ(ans.items[0].blocks_count, 1);
  EXPECT_EQ(ans.items[2].table_from, 2) << "nothing changed for the in-place writer";
  EXPECT_EQ(ans.items[2].blocks_count, 0);
  EXPECT_NE(pool.table(ans.items[0].seq_id)[1], table[1]);
  EXPECT_NE(pool.table(ans.items[0].seq_id)[1], pool.table(ans.items[1].seq_id)[1]);
  for (const auto& g : ans.items) EXPECT_EQ(pool.table(g.seq_id)[0], table[0]);
  EXPECT_EQ(ans.counts.used, 4);
  EXPECT_EQ(ans.counts.shared, 1);

  ans = reserve(pool, {}, {{2, 21}, {3, 21}, {4, 21}});
  EXPECT_EQ(ans.counts.used, 0);
  EXPECT_EQ(ans.counts.free + ans.counts.cached, 10);
}

TEST(block_pool, required_items_are_all_or_nothing) {
  block_pool pool(4, bs, true);
  ASSERT_TRUE(reserve(pool, {admit(1, iota_tokens(32))}).granted);
  kv_item grow;
  grow.seq_id = 1;
  grow.num_computed = 32;
  grow.num_tokens = 80;
  grow.num_new = 48;  // 3 more blocks, 2 free
  auto ans = reserve(pool, {grow});
  EXPECT_FALSE(ans.granted);
  EXPECT_EQ(ans.shortfall, 1);
  EXPECT_EQ(pool.table(1).size(), 2u) << "a refused reservation changes nothing";
  EXPECT_EQ(ans.counts.used, 2);
}

TEST(block_pool, optional_items_stop_at_the_first_that_misses) {
  block_pool pool(5, bs, true);
  auto ans = reserve(pool, {admit(1, iota_tokens(32, 0)), admit(2, iota_tokens(60, 500)),
                            admit(3, iota_tokens(8, 900))});
  ASSERT_TRUE(ans.granted);
  EXPECT_EQ(ans.items.size(), 1u) << "FCFS: the small third request does not jump the queue";
  EXPECT_EQ(pool.num_sequences(), 1u);
}

/// Four prompts of 72 tokens behind one 64-token prefix that is in the cache: each computes only
/// its last 8 tokens.
struct warm_prefix {
  block_pool pool{32, bs, true};
  std::vector<std::vector<int32_t>> prompts;
  warm_prefix() {
    const auto prefix = iota_tokens(64);
    EXPECT_TRUE(reserve(pool, {admit(100, prefix)}).granted);
    reserve(pool, {}, {{100, 64}});
    for (int32_t i = 0; i < 4; ++i) {
      auto t = prefix;
      for (int32_t k = 0; k < 8; ++k) t.push_back(5000 + i * 10 + k);
      prompts.push_back(t);
    }
  }
  /// The four prompts as admission candidates asking for their whole prompt.
  kv_answer admit_all(int32_t admit_tokens, bool chunked, std::vector<kv_item> before = {}) {
    kv_reservation r;
    r.items = std::move(before);
    for (size_t i = 0; i < prompts.size(); ++i) r.items.push_back(admit(static_cast<uint64_t>(i + 1), prompts[i]));
    r.admit_tokens = admit_tokens;
    r.admit_chunked = chunked;
    return pool.reserve(r);
  }
};

TEST(block_pool, admission_charges_only_the_tokens_left_after_prefix_hits) {
  warm_prefix w;
  // 4 x 72 prompt tokens, but only 4 x 8 new ones: a budget of 32 admits all four.
  const auto ans = w.admit_all(32, true);
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 4u);
  for (const auto& g : ans.items) {
    EXPECT_EQ(g.num_computed, 64);
    EXPECT_EQ(g.num_cached, 64);
    EXPECT_EQ(g.num_new, 8);
  }
  EXPECT_EQ(ans.prefix_cache_queries, 4 * 72);
  EXPECT_EQ(ans.prefix_cache_hits, 4 * 64);
}

TEST(block_pool, chunked_admission_cuts_the_item_that_reaches_the_budget) {
  warm_prefix w;
  const auto ans = w.admit_all(29, true);
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 4u);
  EXPECT_EQ(ans.items[2].num_new, 8);
  EXPECT_EQ(ans.items[3].num_new, 5) << "the last candidate computes what is left of the budget";
  int32_t total = 0;
  for (const auto& g : ans.items) total += g.num_new;
  EXPECT_EQ(total, 29);
}

TEST(block_pool, admission_stops_when_the_budget_is_spent_and_leaves_the_rest_untouched) {
  warm_prefix w;
  const auto used_before = w.pool.counts().used;
  auto ans = w.admit_all(24, true);
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 3u) << "the fourth candidate would compute nothing";
  EXPECT_EQ(w.pool.num_sequences(), 3u);
  EXPECT_TRUE(w.pool.table(4).empty());
  EXPECT_EQ(w.pool.counts().used, used_before + 4 + 3) << "the shared prefix plus one block each";
  EXPECT_EQ(ans.prefix_cache_queries, 3 * 72) << "a candidate left out is not counted";
  // The candidate left out is admitted later with its hashes intact.
  kv_reservation r;
  r.items.push_back(admit(4, w.prompts[3]));
  r.admit_tokens = 8;
  ans = w.pool.reserve(r);
  ASSERT_EQ(ans.items.size(), 1u);
  EXPECT_EQ(ans.items[0].num_cached, 64);
  EXPECT_EQ(ans.items[0].num_new, 8);
}

TEST(block_pool, admission_without_chunking_leaves_out_what_does_not_fit) {
  warm_prefix w;
  auto ans = w.admit_all(29, false);
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 3u) << "the fourth would be cut: it waits instead";
  for (const auto& g : ans.items) EXPECT_EQ(g.num_new, 8);
  EXPECT_EQ(w.pool.num_sequences(), 3u);
}

TEST(block_pool, admission_without_chunking_cuts_the_first_item_of_an_empty_step) {
  warm_prefix w;
  auto ans = w.admit_all(5, false);
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 1u);
  EXPECT_EQ(ans.items[0].num_new, 5);

  // Behind a running sequence that computes a token, the same candidate waits.
  warm_prefix v;
  ASSERT_TRUE(reserve(v.pool, {admit(9, iota_tokens(20, 7000))}).granted);
  kv_item decode;
  decode.seq_id = 9;
  decode.num_computed = 20;
  decode.num_tokens = 21;
  decode.num_new = 1;
  ans = v.admit_all(5, false, {decode});
  ASSERT_TRUE(ans.granted);
  ASSERT_EQ(ans.items.size(), 1u) << "only the running sequence";
  EXPECT_EQ(ans.items[0].seq_id, 9u);
}

TEST(block_pool, random_churn_leaks_nothing) {
  block_pool pool(64, bs, true);
  std::mt19937 rng(7);
  std::vector<std::pair<uint64_t, int32_t>> live;
  uint64_t next = 1;
  for (int round = 0; round < 2000; ++round) {
    if (!live.empty() && (rng() % 3 == 0 || live.size() > 12)) {
      const size_t k = rng() % live.size();
      reserve(pool, {}, {{live[k].first, live[k].second}});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    // Prompts share prefixes of one of a few stems so that hits happen.
    auto t = iota_tokens(static_cast<int32_t>(10 + rng() % 70), static_cast<int32_t>(rng() % 3) * 1000);
    auto ans = reserve(pool, {admit(next, t)});
    if (ans.granted && !ans.items.empty()) live.emplace_back(next, static_cast<int32_t>(t.size()));
    ++next;
  }
  for (auto& [id, n] : live) reserve(pool, {}, {{id, n}});
  const auto c = pool.counts();
  EXPECT_EQ(c.used, 0);
  EXPECT_EQ(c.free + c.cached, c.total);
  EXPECT_GT(c.cached, 0);
  EXPECT_EQ(static_cast<int64_t>(pool.free_list().size()), c.total);
}

}  // namespace
}  // namespace actorserve::actors
