// Async scheduling at the policy level: step N+1 is planned (plan_ahead) while N is in flight,
// as the scheduler actor does, over the block pool and the fake model of fake_model.hpp. The
// expected outputs are those of the one-step loop (testing::harness) on the same requests, and
// those of next_token_of() applied to the prompt directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <random>
#include <set>

#include "fake_model.hpp"

namespace actorserve::actors {
namespace {

using testing::fake_model;
using testing::config;
using testing::harness;
using testing::next_token_of;
using testing::prompt_of;

/// The scheduler actor's loop with plain calls: up to two steps in flight, the next one planned
/// as soon as one is submitted; the fake model runs a step when it completes (in order), after
/// resolving gpu::previous_token from the step before, as an executor does.
struct async_harness {
  async_harness(scheduler_config cfg, int32_t num_blocks)
      : sched(cfg), pool(num_blocks, cfg.block_size, cfg.enable_prefix_caching), model(num_blocks, cfg.block_size) {}

  /// Plans and submits one step if possible; false when nothing was submitted.
  bool submit() {
    if (in_flight.size() >= 2) return false;
    const bool ahead = !in_flight.empty();
    auto r = ahead ? sched.plan_ahead() : sched.plan();
    if (!r) return false;
    for (;;) {
      auto d = sched.on_answer(pool.reserve(*r));
      for (auto& f : d.failed) failed.push_back(f);
      if (d.retry) {
        EXPECT_FALSE(ahead) << "planning ahead must not preempt";
        r = std::move(d.retry);
        continue;
      }
      if (!d.step) {
        if (ahead) ++dropped_plans;
        return false;
      }
      for (const auto& s : d.step->seqs) {
        const bool placeholder = s.new_tokens.size() == 1 && s.new_tokens[0] == gpu::previous_token;
        placeholders += placeholder ? 1 : 0;
        EXPECT_TRUE(ahead || !placeholder) << "a placeholder with nothing in flight";
        for (int32_t t : s.new_tokens) EXPECT_TRUE(t >= 0 || placeholder) << "placeholder among other tokens";
        EXPECT_FALSE(placeholder && s.params.uses_penalties()) << "penalties need the token on the host";
      }
      if (ahead) ++ahead_steps;
      in_flight.push_back(std::move(*d.step));
      max_in_flight = std::max(max_in_flight, in_flight.size());
      return true;
    }
  }

  /// Completes the oldest step in flight.
  void complete() {
    gpu::step_batch b = std::move(in_flight.front());
    in_flight.pop_front();
    for (auto& s : b.seqs) {
      if (s.new_tokens.size() != 1 || s.new_tokens[0] != gpu::previous_token) continue;
      auto it = last_sampled.find(s.seq_id);
      ASSERT_NE(it, last_sampled.end()) << "seq " << s.seq_id << ": no token sampled in the step before";
      s.new_tokens[0] = it->second;
    }
    const auto result = model.run(b);
    last_sampled.clear();
    for (const auto& t : result.tokens) last_sampled[t.seq_id] = t.token_id;
    for (auto& o : sched.on_step_done(result)) {
      if (o.has_token) outputs[{o.group_id, o.index}].push_back(o.token.token_id);
      if (o.finish != seq_finish::none) finished[{o.group_id, o.index}] = o.finish;
    }
    ++steps;
    if (after_step) after_step(*this);
  }

  /// Runs until idle; returns the number of steps.
  int run(int limit = 100000) {
    int idle_rounds = 0;
    while (steps < limit && idle_rounds < 3) {
      while (submit()) {
      }
      if (!in_flight.empty()) {
        complete();
        idle_rounds = 0;
      } else if (!sched.has_work()) {
        break;
      } else {
        ++idle_rounds;  // frees or failures only: one more plan settles them
      }
    }
    return steps;
  }

  std::vector<int32_t> out(uint64_t group, int32_t index) { return outputs[{group, index}]; }
  seq_finish fin(uint64_t group, int32_t index) { return finished[{group, index}]; }

  /// Sends the last frees (they travel with one more reservation); no step may come of it.
  void drain() {
    if (auto r = sched.plan()) {
      EXPECT_FALSE(sched.on_answer(pool.reserve(*r)).step.has_value());
    }
  }

  scheduler_policy sched;
  block_pool pool;
  fake_model model;
  std::deque<gpu::step_batch> in_flight;
  std::map<uint64_t, int32_t> last_sampled;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> outputs;
  std::map<std::pair<uint64_t, int32_t>, seq_finish> finished;
  std::vector<seq_output> failed;
  std::function<void(async_harness&)> after_step;
  int steps = 0, ahead_steps = 0, placeholders = 0, dropped_plans = 0;
  size_t max_in_flight = 0;
};

void expect_idle_pool(const block_pool& pool) {
  const auto c = pool.counts();
  EXPECT_EQ(c.used, 0) << "blocks leaked";
  EXPECT_EQ(c.free + c.cached, c.total);
  EXPECT_EQ(pool.num_sequences(), 0u);
}

/// Request i's sampling parameters: a mix of lengths, stop ids (some stop early), penalties and n.
std::shared_ptr<const sampling_params> mixed_params(int i) {
  auto p = std::make_shared<sampling_params>();
  p->temperature = 0.0f;
  p->max_tokens = 1 + i % 13;
  if (i % 3 == 0)
    for (int32_t t = 2; t < 520; t += 11) p->stop_token_ids.push_back(t);  // about one token in eleven stops
  if (i % 7 == 0) p->repetition_penalty = 1.2f;
  if (i % 11 == 0) p->n = 3;
  if (i % 5 == 0) p->min_tokens = std::min(2, p->max_tokens);
  return p;
}

template <class H>
void add_requests(H& h, const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int k = static_cast<int>(i);
    h.sched.add({static_cast<uint64_t>(k), prompts[i], mixed_params(k), static_cast<uint64_t>(100 + k), k % 2});
  }
}

std::vector<std::vector<int32_t>> make_prompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(prompt_of(1 + static_cast<int32_t>(rng() % 70), i));
  return prompts;
}

struct pool_case {
  const char* name;
  int32_t budget, max_seqs, num_blocks;
};

class async_equivalence : public ::testing::TestWithParam<pool_case> {};

TEST_P(async_equivalence, outputs_equal_the_one_step_loop_and_no_block_leaks) {
  const auto& c = GetParam();
  const auto prompts = make_prompts(120, 7);
  harness one(config(c.budget, c.max_seqs), 4096);  // ample: the reference
  add_requests(one, prompts);
  one.run();
  async_harness two(config(c.budget, c.max_seqs), c.num_blocks);
  add_requests(two, prompts);
  two.run();
  EXPECT_TRUE(two.failed.empty());
  EXPECT_EQ(two.outputs, one.outputs);
  EXPECT_EQ(two.finished, one.finished);
  EXPECT_GT(two.placeholders, 0);
  EXPECT_GT(two.ahead_steps, two.steps / 3) << "most steps should be planned ahead";
  EXPECT_EQ(two.max_in_flight, 2u);
  EXPECT_EQ(two.sched.num_steps_in_flight(), 0u);
  two.drain();
  expect_idle_pool(two.pool);
  std::printf("[ figures  ] %s: %d steps, %d planned ahead, %d placeholders, %d plans dropped, %lld preemptions\n",
              c.name, two.steps, two.ahead_steps, two.placeholders, two.dropped_plans,
              static_cast<long long>(two.sched.counters().num_preemptions));
  if (c.num_blocks < 200) {
    EXPECT_GT(two.sched.counters().num_preemptions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(pools, async_equivalence,
                         ::testing::Values(pool_case{"ample", 512, 64, 4096}, pool_case{"small_budget", 48, 16, 4096},
                                           pool_case{"tight_pool", 256, 64, 24}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(async_policy, a_sequence_sampling_in_flight_decodes_a_placeholder_next) {
  async_harness h(config(256, 8), 64);
  const auto prompt = prompt_of(16, 1);
  auto p = std::make_shared<sampling_params>();
  p->temperature = 0.0f;
  p->max_tokens = 4;
  h.sched.add({1, prompt, p, 5, 0});
  ASSERT_TRUE(h.submit());  // step 1: the prompt, samples token 1
  ASSERT_TRUE(h.submit());  // step 2, planned ahead: token 1 is a placeholder
  EXPECT_FALSE(h.submit()) << "at most two steps in flight";
  const auto& s2 = h.in_flight.back().seqs.at(0);
  EXPECT_EQ(s2.new_tokens, std::vector<int32_t>{gpu::previous_token});
  EXPECT_EQ(s2.num_computed, 16);
  EXPECT_EQ(s2.num_generated, 1);
  EXPECT_TRUE(s2.sample);
  EXPECT_EQ(s2.block_table.size(), 2u) << "the placeholder's KV slot (position 16) is reserved";
  h.run();
  std::vector<int32_t> ctx = prompt, want;
  for (int i = 0; i < 4; ++i) {
    want.push_back(next_token_of(ctx) + 5);
    ctx.push_back(want.back());
  }
  EXPECT_EQ(h.out(1, 0), want);
  EXPECT_EQ(h.fin(1, 0), seq_finish::length);
}

TEST(async_policy, the_last_token_is_not_planned_ahead_and_penalties_wait_one_step) {
  async_harness h(config(256, 8), 64);
  auto last = std::make_shared<sampling_params>();
  last->temperature = 0.0f;
  last->max_tokens = 1;  // the token sampled in step 1 ends it by length
  auto pen = std::make_shared<sampling_params>();
  pen->temperature = 0.0f;
  pen->max_tokens = 5;
  pen->frequency_penalty = 0.5f;
  h.sched.add({1, prompt_of(10, 1), last, 1, 0});
  h.sched.add({2, prompt_of(12, 2), pen, 2, 0});
  ASSERT_TRUE(h.submit());
  EXPECT_FALSE(h.submit()) << "neither may decode before step 1's token is on the host";
  h.complete();
  ASSERT_TRUE(h.submit());  // request 2's first decode, with its real token and history
  const auto& s = h.in_flight.back().seqs.at(0);
  EXPECT_EQ(s.seq_id, 2u);
  ASSERT_EQ(s.new_tokens.size(), 1u);
  EXPECT_GE(s.new_tokens[0], 0);
  ASSERT_TRUE(s.history);
  EXPECT_EQ(s.history->size(), 13u);
  h.run();
  EXPECT_EQ(h.out(1, 0).size(), 1u);
  EXPECT_EQ(h.out(2, 0).size(), 5u);
  expect_idle_pool(h.pool);
}

TEST(async_policy, outputs_of_a_stopped_sequence_in_flight_are_dropped_and_its_blocks_freed) {
  // Request 1 stops on its first token (a stop id); its step 2 was planned before that was known.
  const auto prompt = prompt_of(17, 3);
  const int32_t first = next_token_of(prompt) + 4;
  auto p = std::make_shared<sampling_params>();
  p->temperature = 0.0f;
  p->max_tokens = 50;
  p->stop_token_ids = {first};
  async_harness h(config(256, 8), 64);
  h.sched.add({1, prompt, p, 4, 0});
  ASSERT_TRUE(h.submit());
  ASSERT_TRUE(h.submit());
  EXPECT_EQ(h.in_flight.back().seqs.at(0).new_tokens[0], gpu::previous_token);
  h.complete();  // step 1: the stop id; the sequence finishes while step 2 is in flight
  EXPECT_EQ(h.fin(1, 0), seq_finish::stop);
  EXPECT_EQ(h.out(1, 0), std::vector<int32_t>{first});
  EXPECT_EQ(h.pool.counts().used, 2) << "its blocks stay until the next reservation";
  h.run();
  EXPECT_EQ(h.out(1, 0), std::vector<int32_t>{first}) << "step 2's token is dropped";
  h.drain();
  expect_idle_pool(h.pool);
}

TEST(async_policy, aborts_while_two_steps_are_in_flight_leak_nothing) {
  const auto prompts = make_prompts(60, 3);
  async_harness h(config(128, 32), 300);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto p = std::make_shared<sampling_params>();
    p->temperature = 0.0f;
    p->max_tokens = 30;
    h.sched.add({i, prompts[i], p, i, 0});
  }
  std::set<uint64_t> aborted;
  std::mt19937 rng(5);
  h.after_step = [&](async_harness& a) {
    if (rng() % 3 != 0) return;
    const uint64_t g = rng() % prompts.size();
    aborted.insert(g);
    a.sched.abort(g);
  };
  h.run();
  EXPECT_FALSE(aborted.empty());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (aborted.count(i)) continue;
    EXPECT_EQ(h.out(i, 0).size(), 30u) << "request " << i;
  }
  h.drain();
  expect_idle_pool(h.pool);
}

}  // namespace
}  // namespace actorserve::actors
