// The scheduler's per-request milestones (queued, first scheduled, first and last token) on a
// fake clock, the request times they give (vLLM's queue, prefill, decode and inference time),
// and the histogram of tokens computed per step.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <numeric>

#include "fake_model.hpp"

namespace actorserve::actors {
namespace {

using testing::config;
using testing::harness;
using testing::params;
using testing::prompt_of;

/// A clock the test moves: every step takes `step_us` between its grant and its result.
struct fake_clock {
  int64_t now = 0;
  scheduler_clock fn() {
    return [this] { return now; };
  }
};

TEST(request_times, chunked_prefill_then_decode_on_the_scheduler_clock) {
  fake_clock clock;
  harness h(config(16, 8), 64, clock.fn());
  h.on_step = [&](const gpu::step_batch&) { clock.now += 1000; };
  clock.now = 100;
  h.sched.add({1, prompt_of(40, 1), params(4), 0, 0});  // queued at 100
  clock.now = 600;                                         // scheduled at 600
  h.run();
  // Prefill in chunks of 16, 16, 8: the first token comes with the third result (at 3600), then
  // one token per step until the fourth (6600).
  ASSERT_EQ(h.step_tokens, (std::vector<int32_t>{16, 16, 8, 1, 1, 1}));
  const seq_output& o = h.last_output.at({1, 0});
  EXPECT_EQ(o.finish, seq_finish::length);
  EXPECT_EQ(o.scheduled_us, 500);
  EXPECT_EQ(o.first_token_us, 3500);
  EXPECT_EQ(o.last_token_us, 6500);
  request_clock rc;
  rc.add(o);
  const request_times t = rc.times();
  ASSERT_TRUE(t.queue_s && t.prefill_s && t.decode_s && t.inference_s);
  EXPECT_DOUBLE_EQ(*t.queue_s, 0.0005);
  EXPECT_DOUBLE_EQ(*t.prefill_s, 0.003);
  EXPECT_DOUBLE_EQ(*t.decode_s, 0.003);
  EXPECT_DOUBLE_EQ(*t.inference_s, 0.006);
}

TEST(request_times, a_request_queued_behind_others_waits_until_its_first_step) {
  fake_clock clock;
  harness h(config(256, 1), 64, clock.fn());  // one sequence at a time
  h.on_step = [&](const gpu::step_batch&) { clock.now += 1000; };
  h.sched.add({1, prompt_of(5, 1), params(3), 0, 0});
  h.sched.add({2, prompt_of(5, 2), params(3), 0, 0});
  h.run();
  // The first runs three steps (0..3000); the second is scheduled when it ends.
  EXPECT_EQ(h.last_output.at({1, 0}).scheduled_us, 0);
  EXPECT_EQ(h.last_output.at({2, 0}).scheduled_us, 3000);
  EXPECT_EQ(h.last_output.at({2, 0}).first_token_us, 4000);
  EXPECT_EQ(h.last_output.at({2, 0}).last_token_us, 6000);
}

TEST(request_times, preemption_keeps_the_first_scheduling_and_counts_in_decode_time) {
  // Block size 4, 7 blocks: three sequences growing to 24 tokens must take turns.
  fake_clock clock;
  harness h(config(256, 8, 4), 7, clock.fn());
  std::map<uint64_t, int64_t> first_step;  // group -> clock at its first grant
  std::map<uint64_t, int64_t> last_step;   // group -> clock at its last result
  h.on_step = [&](const gpu::step_batch& b) {
    for (const auto& s : b.seqs) {
      const sequence* seq = h.sched.find(s.seq_id);
      if (seq) {
        first_step.emplace(seq->group_id, clock.now);
        last_step[seq->group_id] = clock.now + 1000;
      }
    }
    clock.now += 1000;
  };
  for (uint64_t g : {1u, 2u, 3u}) h.sched.add({g, prompt_of(4, static_cast<int32_t>(g)), params(20), 0, 0});
  h.run();
  ASSERT_GT(h.sched.counters().num_preemptions, 0);
  bool some_preempted = false;
  for (uint64_t g : {1u, 2u, 3u}) {
    const seq_output& o = h.last_output.at({g, 0});
    some_preempted = some_preempted || o.num_preemptions > 0;
    EXPECT_EQ(o.scheduled_us, first_step.at(g)) << "group " << g << ": queue time ends at the first scheduling";
    EXPECT_EQ(o.last_token_us, last_step.at(g)) << "group " << g;
    // Decode time spans every step from the first token to the last, time spent preempted included.
    EXPECT_GE(o.last_token_us - o.first_token_us, 19 * 1000) << "group " << g;
  }
  EXPECT_TRUE(some_preempted);
}

TEST(request_times, forked_choices_inherit_the_parents_scheduling) {
  fake_clock clock;
  harness h(config(256, 8), 64, clock.fn());
  h.on_step = [&](const gpu::step_batch&) { clock.now += 1000; };
  clock.now = 50;
  h.sched.add({7, prompt_of(20, 7), params(3, 3), 0, 0});
  clock.now = 250;
  h.run();
  request_clock rc;
  for (int32_t i = 0; i < 3; ++i) {
    const seq_output& o = h.last_output.at({7, i});
    EXPECT_EQ(o.scheduled_us, 200) << "choice " << i;
    rc.add(o);
  }
  const request_times t = rc.times();
  ASSERT_TRUE(t.queue_s && t.inference_s);
  EXPECT_DOUBLE_EQ(*t.queue_s, 0.0002);
  EXPECT_GT(*t.inference_s, 0.0);
}

TEST(request_times, milestones_not_reached_give_no_time) {
  request_clock rc;
  EXPECT_FALSE(rc.times().queue_s.has_value());
  seq_output waiting_only;  // aborted before its first step
  rc.add(waiting_only);
  const request_times t = rc.times();
  EXPECT_FALSE(t.queue_s || t.prefill_s || t.decode_s || t.inference_s);
  seq_output scheduled;
  scheduled.scheduled_us = 40;
  rc.add(scheduled);
  EXPECT_EQ(rc.times().queue_s, 0.00004);
  EXPECT_FALSE(rc.times().prefill_s.has_value());
}

TEST(iteration_tokens, one_count_per_step_in_its_bucket_summing_to_the_computed_tokens) {
  harness h(config(300, 8), 256);
  for (int32_t i = 0; i < 6; ++i) h.sched.add({static_cast<uint64_t>(i), prompt_of(20 + 37 * i, i), params(5), 0, 0});
  h.run();
  const auto& c = h.sched.counters();
  std::array<int64_t, num_iteration_tokens_buckets> want{};
  for (int32_t tokens : h.step_tokens) {
    size_t b = 0;
    while (b < std::size(iteration_tokens_bounds) && tokens > iteration_tokens_bounds[b]) ++b;
    ++want[b];
  }
  EXPECT_EQ(c.iteration_tokens, want);
  EXPECT_EQ(std::accumulate(c.iteration_tokens.begin(), c.iteration_tokens.end(), int64_t{0}), c.num_steps);
  EXPECT_EQ(std::accumulate(h.step_tokens.begin(), h.step_tokens.end(), int64_t{0}), c.num_computed_tokens);
}

}  // namespace
}  // namespace actorserve::actors
