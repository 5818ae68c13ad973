// The scheduling policy over many steps, with a block pool and a fake model that appends one token
// per sampled sequence (see fake_model.hpp). Expected outputs come from next_token_of() applied to
// the prompt directly, never from the scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "fake_model.hpp"

namespace actorserve::actors {
namespace {

using testing::harness;
using testing::next_token_of;
using testing::params;
using testing::prompt_of;

std::vector<int32_t> reference(std::vector<int32_t> tokens, int32_t max_tokens, uint64_t seed) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    const int32_t t = next_token_of(tokens) + static_cast<int32_t>(seed % 7);
    out.push_back(t);
    tokens.push_back(t);
  }
  return out;
}

scheduler_config config(int32_t budget, int32_t max_seqs, bool chunked = true, int32_t block_size = 16) {
  scheduler_config c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.enable_chunked_prefill = chunked;
  c.block_size = block_size;
  c.eos_token_ids = {1};
  return c;
}

void expect_idle_pool(const block_pool& pool) {
  const auto c = pool.counts();
  EXPECT_EQ(c.used, 0);
  EXPECT_EQ(c.free + c.cached, c.total);
  EXPECT_EQ(pool.num_sequences(), 0u);
}

struct budget_case {
  const char* name;
  int32_t budget, max_seqs;
  bool chunked;
  int32_t num_requests, min_prompt, max_prompt, max_tokens, num_blocks;
};

class budget_table : public ::testing::TestWithParam<budget_case> {};

TEST_P(budget_table, respects_budget_and_cap_and_computes_the_reference) {
  const auto& c = GetParam();
  harness h(config(c.budget, c.max_seqs, c.chunked), c.num_blocks);
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < c.num_requests; ++i) {
    const int32_t len = c.min_prompt + static_cast<int32_t>(rng() % static_cast<uint32_t>(c.max_prompt - c.min_prompt + 1));
    prompts.push_back(prompt_of(len, i));
    h.sched.add({static_cast<uint64_t>(i), prompts.back(), params(c.max_tokens), static_cast<uint64_t>(i), 0});
  }
  const int steps = h.run();
  EXPECT_LT(steps, 100000);
  for (size_t s = 0; s < h.step_tokens.size(); ++s) {
    EXPECT_LE(h.step_tokens[s], c.budget) << "step " << s;
    EXPECT_LE(h.step_seqs[s], c.max_seqs) << "step " << s;
    EXPECT_GT(h.step_tokens[s], 0);
  }
  EXPECT_TRUE(h.failed.empty());
  for (int32_t i = 0; i < c.num_requests; ++i) {
    const auto key = std::make_pair(static_cast<uint64_t>(i), 0);
    EXPECT_EQ(h.outputs[key], reference(prompts[static_cast<size_t>(i)], c.max_tokens, static_cast<uint64_t>(i)))
        << "request " << i;
    EXPECT_EQ(h.finished[key], seq_finish::length);
  }
  expect_idle_pool(h.pool);
  EXPECT_EQ(h.sched.num_running() + h.sched.num_waiting(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    scheduler, budget_table,
    ::testing::Values(budget_case{"ample", 2048, 256, true, 40, 1, 60, 12, 1024},
                      budget_case{"tight_budget", 24, 256, true, 30, 5, 90, 8, 1024},
                      budget_case{"seq_cap", 512, 3, true, 20, 1, 40, 10, 1024},
                      budget_case{"no_chunking", 128, 16, false, 25, 10, 100, 6, 1024},
                      budget_case{"tiny_pool", 256, 64, true, 40, 10, 40, 20, 24},
                      budget_case{"one_token_budget", 1, 4, true, 5, 1, 9, 4, 64}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(scheduler, chunked_prefill_spreads_a_long_prompt_over_steps) {
  harness h(config(32, 8), 64);
  h.sched.add({1, prompt_of(100, 1), params(3), 0, 0});
  h.run();
  const std::vector<int32_t> expected{32, 32, 32, 4, 1, 1};
  EXPECT_EQ(h.step_tokens, expected);
  EXPECT_EQ(h.out(1, 0), reference(prompt_of(100, 1), 3, 0));
}

TEST(scheduler, decodes_and_prefill_chunks_share_a_step) {
  harness h(config(32, 8), 64);
  h.sched.add({1, prompt_of(10, 1), params(8), 0, 0});
  h.step();  // prefill of the short prompt
  h.sched.add({2, prompt_of(80, 2), params(2), 0, 0});
  h.run();
  // Step 2: one decode token + a 31-token chunk; then 1 + 31, 1 + 18 (end of prompt), decodes.
  ASSERT_GE(h.step_tokens.size(), 4u);
  EXPECT_EQ(h.step_tokens[0], 10);
  EXPECT_EQ(h.step_tokens[1], 32);
  EXPECT_EQ(h.step_tokens[2], 32);
  EXPECT_EQ(h.step_tokens[3], 1 + 18);
  EXPECT_EQ(h.out(2, 0), reference(prompt_of(80, 2), 2, 0));
  EXPECT_EQ(h.out(1, 0), reference(prompt_of(10, 1), 8, 0));
}

TEST(scheduler, waiting_queue_serves_priority_then_arrival) {
  harness h(config(256, 1), 64);
  std::vector<uint64_t> first_seen;
  h.on_step = [&](const gpu::step_batch& b) {
    for (const auto& s : b.seqs) {
      const auto* seq = h.sched.find(s.seq_id);
      if (seq && std::find(first_seen.begin(), first_seen.end(), seq->group_id) == first_seen.end())
        first_seen.push_back(seq->group_id);
    }
  };
  h.sched.add({10, prompt_of(5, 0), params(2), 0, 5});
  h.sched.add({11, prompt_of(5, 1), params(2), 0, 0});
  h.sched.add({12, prompt_of(5, 2), params(2), 0, 0});
  h.sched.add({13, prompt_of(5, 3), params(2), 0, -1});
  h.run();
  EXPECT_EQ(first_seen, (std::vector<uint64_t>{13, 11, 12, 10}));
}

TEST(scheduler, preemption_picks_lowest_priority_then_latest_arrival) {
  // Block size 4, 7 blocks: three sequences growing to 24 tokens (6 blocks each) must take turns.
  harness h(config(256, 8, true, 4), 7);
  h.sched.add({1, prompt_of(4, 1), params(20), 0, 0});   // A: priority 0, first
  h.sched.add({2, prompt_of(4, 2), params(20), 0, 1});   // B: priority 1
  h.sched.add({3, prompt_of(4, 3), params(20), 0, 0});   // C: priority 0, last
  std::vector<uint64_t> victims;
  std::map<uint64_t, int32_t> seen;
  h.on_step = [&](const gpu::step_batch&) {
    for (uint64_t g : {1u, 2u, 3u}) {
      for (uint64_t id : h.sched.group(g)) {
        const int32_t n = h.sched.find(id)->num_preemptions;
        if (n > seen[g]) victims.push_back(g);
        seen[g] = n;
      }
    }
  };
  h.run();
  ASSERT_FALSE(victims.empty());
  EXPECT_EQ(victims.front(), 2u) << "the lowest priority goes first";
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 1u), 0) << "A outranks and predates everyone";
  EXPECT_GT(std::count(victims.begin(), victims.end(), 3u), 0) << "C is the next victim after B";
  for (uint64_t g : {1u, 2u, 3u}) EXPECT_EQ(h.out(g, 0), reference(prompt_of(4, static_cast<int32_t>(g)), 20, 0));
  EXPECT_GT(h.sched.counters().num_preemptions, 0);
  EXPECT_GT(h.sched.counters().num_recomputed_tokens, 0);
  expect_idle_pool(h.pool);
}

TEST(scheduler, preemption_does_not_change_outputs) {
  auto run_with = [](int32_t blocks) {
    harness h(config(512, 64), blocks);
    for (int32_t i = 0; i < 64; ++i) h.sched.add({static_cast<uint64_t>(i), prompt_of(10 + i % 23, i), params(24), 0, 0});
    h.run();
    EXPECT_TRUE(h.failed.empty());
    expect_idle_pool(h.pool);
    return std::make_pair(h.outputs, h.sched.counters());
  };
  const auto ample = run_with(512);
  const auto tight = run_with(12);
  EXPECT_EQ(ample.second.num_preemptions, 0);
  EXPECT_GT(tight.second.num_preemptions, 0);
  EXPECT_EQ(tight.first, ample.first);
  EXPECT_EQ(tight.first.size(), 64u);
}

TEST(scheduler, prefix_hits_skip_computation) {
  harness h(config(512, 8), 64);
  auto shared = prompt_of(70, 5);
  auto second = shared;
  second.resize(64);
  second.insert(second.end(), {901, 902, 903, 904, 905});
  h.sched.add({1, shared, params(4), 0, 0});
  h.run();
  const int64_t computed_first = h.sched.counters().num_computed_tokens;
  EXPECT_EQ(computed_first, 70 + 3);
  h.sched.add({2, second, params(4), 0, 0});
  h.run();
  EXPECT_EQ(h.sched.counters().num_computed_tokens - computed_first, (69 - 64) + 3)
      << "only the 5 new prompt tokens and the decodes are computed";
  EXPECT_EQ(h.sched.counters().prefix_cache_hits, 64);
  EXPECT_EQ(h.out(2, 0), reference(second, 4, 0));
}

struct cached_admission_case {
  const char* name;
  int32_t budget;
  bool chunked;
  int32_t first_tokens, first_seqs;  ///< the step that admits the batch
};

class cached_admission : public ::testing::TestWithParam<cached_admission_case> {};

// 16 prompts of 4224 tokens behind a 4096-token prefix already in the cache: each computes only
// its own 128 tokens, and only those count against the budget when it is admitted.
TEST_P(cached_admission, prefix_hits_do_not_count_against_the_budget) {
  const auto& c = GetParam();
  harness h(config(c.budget, 64, c.chunked), 512);
  const auto prefix = prompt_of(4096, 77);
  h.sched.add({100, prefix, params(1), 0, 0});  // the warm prefix
  h.run();
  const size_t warm_steps = h.step_tokens.size();
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 16; ++i) {
    auto t = prefix;
    const auto own = prompt_of(128, i);
    t.insert(t.end(), own.begin(), own.end());
    prompts.push_back(t);
    h.sched.add({static_cast<uint64_t>(i), t, params(3), 0, 0});
  }
  h.run();
  ASSERT_GT(h.step_tokens.size(), warm_steps);
  EXPECT_EQ(h.step_tokens[warm_steps], c.first_tokens);
  EXPECT_EQ(h.step_seqs[warm_steps], c.first_seqs);
  for (size_t s = 0; s < h.step_tokens.size(); ++s) EXPECT_LE(h.step_tokens[s], c.budget) << "step " << s;
  EXPECT_EQ(h.sched.counters().prefix_cache_hits, 16 * 4096);
  EXPECT_EQ(h.sched.counters().num_computed_tokens, 4096 + 16 * (128 + 2));
  EXPECT_TRUE(h.failed.empty());
  for (int32_t i = 0; i < 16; ++i) {
    EXPECT_EQ(h.out(static_cast<uint64_t>(i), 0), reference(prompts[static_cast<size_t>(i)], 3, 0)) << "request " << i;
    const auto key = std::make_pair(static_cast<uint64_t>(i), 0);
    EXPECT_EQ(h.last_output[key].num_cached, 4096);
  }
  expect_idle_pool(h.pool);
}

INSTANTIATE_TEST_SUITE_P(
    scheduler, cached_admission,
    ::testing::Values(cached_admission_case{"all_in_one_step", 4096, true, 16 * 128, 16},
                      cached_admission_case{"chunked_cut", 1000, true, 1000, 8},
                      cached_admission_case{"unchunked_cut", 1000, false, 7 * 128, 7}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(scheduler, parallel_samples_share_the_prompt_and_diverge) {
  harness h(config(512, 8), 64);
  const auto prompt = prompt_of(37, 9);  // 2 full blocks + a partial one
  h.sched.add({1, prompt, params(12, 4), 0, 0});
  int64_t max_shared = 0;
  h.on_step = [&](const gpu::step_batch&) { max_shared = std::max(max_shared, h.pool.counts().shared); };
  h.run();
  EXPECT_EQ(max_shared, 2) << "the two full prompt blocks are shared by all four samples";
  std::set<std::vector<int32_t>> distinct;
  for (int32_t i = 0; i < 4; ++i) {
    const auto& out = h.out(1, i);
    ASSERT_EQ(out.size(), 12u);
    distinct.insert(out);
    bool matches_some_seed = false;
    for (uint64_t o = 0; o < 7; ++o) matches_some_seed |= out == reference(prompt, 12, o);
    EXPECT_TRUE(matches_some_seed) << "sample " << i << " reads a wrong KV slot";
  }
  EXPECT_EQ(distinct.size(), 4u);
  expect_idle_pool(h.pool);
}

TEST(scheduler, aborts_free_blocks_at_any_point) {
  harness h(config(128, 32), 40);
  std::mt19937 rng(3);
  std::set<uint64_t> aborted;
  for (uint64_t g = 0; g < 200; ++g) h.sched.add({g, prompt_of(5 + static_cast<int32_t>(g % 40), static_cast<int32_t>(g)), params(16), 0, 0});
  while (h.step()) {
    for (int k = 0; k < 2; ++k) {
      const uint64_t g = rng() % 200;
      if (h.finished.count({g, 0}) == 0 && aborted.insert(g).second) h.sched.abort(g);
    }
  }
  EXPECT_GT(aborted.size(), 50u);
  for (uint64_t g = 0; g < 200; ++g) {
    if (aborted.count(g)) continue;
    EXPECT_EQ(h.out(g, 0), reference(prompt_of(5 + static_cast<int32_t>(g % 40), static_cast<int32_t>(g)), 16, 0));
  }
  expect_idle_pool(h.pool);
}

TEST(scheduler, a_prompt_larger_than_the_pool_fails_alone) {
  harness h(config(512, 8), 4);
  h.sched.add({1, prompt_of(100, 1), params(4), 0, 0});
  h.sched.add({2, prompt_of(10, 2), params(4), 0, 0});
  h.run();
  ASSERT_EQ(h.failed.size(), 1u);
  EXPECT_EQ(h.failed[0].group_id, 1u);
  EXPECT_EQ(h.out(2, 0), reference(prompt_of(10, 2), 4, 0));
  expect_idle_pool(h.pool);
}

}  // namespace
}  // namespace actorserve::actors
