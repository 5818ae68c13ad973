// A choice resumed on another engine (the front end's failover): prompt + the tokens it already
// streamed, its generated count, index and seed continue exactly where the first engine stopped.
#include <gtest/gtest.h>

#include "actors/sequence.hpp"
#include "fake_model.hpp"

namespace actorserve::actors {
namespace {

using testing::harness;
using testing::params;
using testing::prompt_of;

scheduler_config config() {
  scheduler_config c;
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = 16;
  c.block_size = 16;
  c.eos_token_ids = {1};
  return c;
}

TEST(resumed_choice, continues_each_choice_of_an_n2_request_where_it_stopped) {
  const auto prompt = prompt_of(37, 5);
  constexpr uint64_t seed = 1234;
  harness whole(config(), 256);
  whole.sched.add({.group_id = 1, .prompt = prompt, .params = params(10, 2), .seed = seed});
  whole.run();
  for (int32_t i = 0; i < 2; ++i) {
    const auto full = whole.out(1, i);
    ASSERT_EQ(full.size(), 10u);
    constexpr int32_t streamed = 4;
    harness resumed(config(), 256);
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), full.begin(), full.begin() + streamed);
    int32_t first_generated = -1;
    resumed.on_step = [&](const gpu::step_batch& b) {
      for (const auto& q : b.seqs)
        if (q.sample && first_generated < 0) first_generated = q.num_generated;
    };
    resumed.sched.add({.group_id = 7, .prompt = tokens, .params = params(10, 1), .seed = child_seed(seed, i),
                       .num_generated = streamed, .index = i});
    resumed.run();
    EXPECT_EQ(first_generated, streamed) << "the sampler's counter continues";
    EXPECT_EQ(resumed.out(7, i), std::vector<int32_t>(full.begin() + streamed, full.end())) << "choice " << i;
    EXPECT_EQ(resumed.finished[std::make_pair(uint64_t{7}, i)], seq_finish::length) << "max_tokens counts the streamed tokens";
    EXPECT_EQ(resumed.sched.counters().prompt_tokens, static_cast<int64_t>(prompt.size()));
  }
}

}  // namespace
}  // namespace actorserve::actors
