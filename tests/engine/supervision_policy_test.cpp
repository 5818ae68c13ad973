// The supervision policy on its own, with a scripted clock: when a failed step restarts the
// executor, when the engine gives up and what it then tells its requests, the pool's size after a
// restart, the watchdog's deadline and the engine's health around a restart.
#include <gtest/gtest.h>

#include "actors/supervision_policy.hpp"

namespace actorserve::actors {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using clock = supervision_policy::clock;
using verdict = supervision_policy::verdict;

supervision_config config(int32_t max_restarts = 3, milliseconds window = seconds(60), int32_t num_blocks = 0) {
  supervision_config c;
  c.step_timeout = seconds(60);
  c.max_restarts = max_restarts;
  c.restart_window = window;
  c.num_blocks = num_blocks;
  return c;
}

const clock::time_point t0{};

TEST(supervision_policy, a_failed_step_restarts_the_executor_in_a_new_epoch) {
  supervision_policy sup(config());
  EXPECT_FALSE(sup.restarting());
  EXPECT_FALSE(sup.recovering());
  EXPECT_EQ(sup.epoch(), 0u);
  EXPECT_EQ(sup.on_failure("step 5 failed: boom", t0), verdict::restart);
  EXPECT_TRUE(sup.restarting()) << "nothing is planned until the fresh executor is up";
  EXPECT_TRUE(sup.recovering());
  EXPECT_FALSE(sup.gave_up());
  EXPECT_EQ(sup.epoch(), 1u) << "answers requested before the failure are stale";
}

TEST(supervision_policy, the_engine_is_unhealthy_until_the_first_good_step_after_the_restart) {
  supervision_policy sup(config());
  sup.on_failure("step 5 failed", t0);
  ASSERT_EQ(sup.on_restarted(100, ""), 100);
  EXPECT_FALSE(sup.restarting()) << "planning resumes";
  EXPECT_TRUE(sup.recovering()) << "no good step yet";
  sup.on_progress();
  EXPECT_FALSE(sup.recovering());
}

TEST(supervision_policy, more_failures_than_max_restarts_within_the_window_give_up) {
  supervision_policy sup(config(3, seconds(60)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sup.on_failure("step failed", t0 + seconds(i)), verdict::restart) << "failure " << i + 1;
    ASSERT_TRUE(sup.on_restarted(100, ""));
  }
  EXPECT_EQ(sup.on_failure("step 9 failed: boom", t0 + seconds(3)), verdict::give_up);
  EXPECT_TRUE(sup.gave_up());
  EXPECT_EQ(sup.give_up_message(), "engine: executor failed repeatedly: step 9 failed: boom");
}

TEST(supervision_policy, failures_older_than_the_window_are_forgotten) {
  supervision_policy sup(config(1, seconds(10)));
  EXPECT_EQ(sup.on_failure("a", t0), verdict::restart);
  ASSERT_TRUE(sup.on_restarted(100, ""));
  EXPECT_EQ(sup.on_failure("b", t0 + seconds(11)), verdict::restart) << "the first failure left the window";
  ASSERT_TRUE(sup.on_restarted(100, ""));
  EXPECT_EQ(sup.on_failure("c", t0 + seconds(12)), verdict::give_up) << "two failures within 10 s, one allowed";
}

TEST(supervision_policy, no_restarts_allowed_gives_up_at_the_first_failure) {
  supervision_policy sup(config(0));
  EXPECT_EQ(sup.on_failure("step 1 failed", t0), verdict::give_up);
  EXPECT_TRUE(sup.gave_up());
}

TEST(supervision_policy, a_failed_restart_gives_up_naming_both_failures) {
  supervision_policy sup(config());
  sup.on_failure("step 5 failed: boom", t0);
  EXPECT_FALSE(sup.on_restarted(0, "out of memory"));
  EXPECT_TRUE(sup.gave_up());
  EXPECT_EQ(sup.give_up_message(), "engine: executor failed repeatedly: step 5 failed: boom; the restart failed: out of memory");
}

TEST(supervision_policy, the_fresh_pool_is_capped_at_the_configured_size) {
  supervision_policy capped(config(3, seconds(60), 64));
  capped.on_failure("x", t0);
  EXPECT_EQ(capped.on_restarted(100, ""), 64) << "--num-gpu-blocks-override caps the fresh executor's pool";
  capped.on_failure("x", t0);
  EXPECT_EQ(capped.on_restarted(40, ""), 40) << "a smaller executor is taken as it is";
  EXPECT_EQ(capped.num_blocks(), 64);

  supervision_policy uncapped(config());
  uncapped.on_failure("x", t0);
  EXPECT_EQ(uncapped.on_restarted(100, ""), 100);
}

TEST(supervision_policy, a_step_is_overdue_once_the_step_timeout_has_passed) {
  supervision_policy sup(config());
  EXPECT_FALSE(sup.overdue(7, t0, t0 + seconds(59)));
  const auto why = sup.overdue(7, t0, t0 + seconds(60));
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "step 7 did not complete within 60000 ms");
  EXPECT_EQ(sup.watchdog_period(), seconds(15)) << "the watchdog looks four times per timeout";
}

TEST(supervision_policy, the_watchdog_period_has_a_floor) {
  supervision_config c = config();
  c.step_timeout = milliseconds(20);
  supervision_policy sup(c);
  EXPECT_EQ(sup.watchdog_period(), milliseconds(10));
}

}  // namespace
}  // namespace actorserve::actors
