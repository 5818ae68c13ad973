// Invalid steps are answered with an error status naming the problem; they never crash and
// never touch the cache.
#include <gtest/gtest.h>

#include <future>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class invalid_step_test : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu::cpu_executor_options opts;
    opts.block_size = 16;
    opts.num_blocks = 8;
    opts.threads = 1;
    opts.max_model_len = 100;
    auto ex = gpu::cpu_executor::create(model_dir("llama-tiny"), opts);
    ASSERT_TRUE(ex.ok()) << ex.err().message;
    ex_ = std::move(ex).value();
  }
  /// Runs a one-sequence step and returns its error message ("" on success).
  std::string run(gpu::step_sequence s, std::vector<std::pair<int32_t, int32_t>> copies = {}) {
    gpu::step_batch b;
    b.step_id = 5;
    b.seqs.push_back(std::move(s));
    b.block_copies = std::move(copies);
    auto r = ex_->run_step_sync(b);
    EXPECT_TRUE(r.tokens.empty() || r.outcome.ok());
    return r.outcome.ok() ? std::string() : r.outcome.err().message;
  }
  std::unique_ptr<gpu::cpu_executor> ex_;
};

TEST_F(invalid_step_test, info_reflects_options_and_config) {
  EXPECT_EQ(ex_->info().name, "cpu");
  EXPECT_EQ(ex_->info().vocab_size, 1024);
  EXPECT_EQ(ex_->info().max_model_len, 100);
  EXPECT_EQ(ex_->info().num_blocks, 8);
  EXPECT_EQ(ex_->info().eos_token_ids, std::vector<int32_t>{1});
}

TEST_F(invalid_step_test, rejects_bad_blocks_positions_and_tokens) {
  EXPECT_EQ(run(greedy_seq(1, 0, {5, 6}, {0})), "");
  EXPECT_NE(run(greedy_seq(1, 0, {5, 6}, {8})).find("block id 8"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 0, {5, 6}, {-1})).find("block id -1"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 0, {5, 6}, {})).find("empty block table"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 15, {5, 6}, {0})).find("cannot hold"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 99, {5, 6}, block_range(0, 7))).find("max_model_len"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 0, {5, 1024}, {0})).find("token id 1024"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 0, {}, {0})).find("no new tokens"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, -3, {5}, {0})).find("num_computed"), std::string::npos);
  EXPECT_NE(run(greedy_seq(1, 0, {5}, {0}), {{0, 9}}).find("block copy"), std::string::npos);
}

TEST_F(invalid_step_test, error_steps_come_back_through_submit) {
  std::promise<gpu::step_result> got;
  gpu::step_batch b;
  b.step_id = 77;
  b.seqs.push_back(greedy_seq(1, 0, {5}, {1000}));
  ex_->submit(b, [&](gpu::step_result r) { got.set_value(std::move(r)); });
  auto fut = got.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto r = fut.get();
  EXPECT_EQ(r.step_id, 77u);
  ASSERT_FALSE(r.outcome.ok());
  EXPECT_EQ(r.outcome.err().code, error_code::invalid_argument);
}

}  // namespace
}  // namespace actorserve::testing
