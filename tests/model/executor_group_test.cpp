// The lock-step group of shard executors: results per step gathered from every shard and handed
// back in submission order whatever order the shards finish in; a failure in one shard fails the
// step without leaving the others blocked in their collective, and the group refuses later steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/cpu/cpu_executor.hpp"
#include "gpu/executor_group.hpp"
#include "gpu/fault_injection.hpp"
#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

/// A shard whose steps finish when the test says, each from a thread of its own.
class manual_shard final : public gpu::executor {
 public:
  explicit manual_shard(gpu::executor_info info, bool logit_bias = true) : info_(std::move(info)), bias_(logit_bias) {}
  ~manual_shard() override {
    for (auto& t : threads_) t.join();
  }
  const gpu::executor_info& info() const override { return info_; }
  bool supports_logit_bias() const override { return bias_; }
  bool supports_token_masks() const override { return true; }
  void submit(gpu::step_batch batch, done_fn done) override {
    std::lock_guard lock(mu_);
    steps_.push_back({std::move(batch), std::move(done)});
  }
  /// Finishes the `i`th submitted step with `token` sampled for its one sequence.
  void finish(size_t i, int32_t token, double device_ms, status outcome = {}) {
    std::lock_guard lock(mu_);
    gpu::step_result r;
    r.step_id = steps_.at(i).batch.step_id;
    r.outcome = std::move(outcome);
    r.device_ms = device_ms;
    r.tokens.push_back({steps_.at(i).batch.seqs.at(0).seq_id, token, 0.0f, {}});
    threads_.emplace_back([done = steps_.at(i).done, r = std::move(r)]() mutable { done(std::move(r)); });
  }

 private:
  struct step {
    gpu::step_batch batch;
    done_fn done;
  };
  gpu::executor_info info_;
  bool bias_;
  std::mutex mu_;
  std::vector<step> steps_;
  std::vector<std::thread> threads_;
};

/// Results the group hands back, in the order it hands them.
struct delivery_log {
  std::mutex mu;
  std::vector<gpu::step_result> results;
  std::promise<void> all;
  size_t expected = 0;
  gpu::executor::done_fn sink() {
    return [this](gpu::step_result r) {
      std::lock_guard lock(mu);
      results.push_back(std::move(r));
      if (results.size() == expected) all.set_value();
    };
  }
};

gpu::step_batch one_seq_step(uint64_t step_id) {
  gpu::step_batch b;
  b.step_id = step_id;
  b.seqs.push_back(greedy_seq(42, 0, {1, 2, 3}, {0}));
  return b;
}

TEST(executor_group, steps_come_back_in_submission_order_when_shards_finish_out_of_order) {
  gpu::executor_info info;
  info.name = "fake";
  info.num_blocks = 100;
  info.host_kv_cache_bytes = 1000;
  auto a = std::make_unique<manual_shard>(info);
  info.num_blocks = 80;
  auto b = std::make_unique<manual_shard>(info, false);
  manual_shard *s0 = a.get(), *s1 = b.get();
  std::vector<std::unique_ptr<gpu::executor>> shards;
  shards.push_back(std::move(a));
  shards.push_back(std::move(b));
  std::atomic<int> aborts{0};
  gpu::executor_group group(std::move(shards), [&] { ++aborts; });
  EXPECT_EQ(group.info().name, "fake");
  EXPECT_EQ(group.info().num_blocks, 80);
  EXPECT_EQ(group.info().host_kv_cache_bytes, 2000);
  EXPECT_TRUE(group.supports_token_masks());
  EXPECT_FALSE(group.supports_logit_bias()) << "one shard lacks it";

  delivery_log log;
  log.expected = 3;
  for (uint64_t id : {10, 11, 12}) group.submit(one_seq_step(id), log.sink());
  // Step 12 completes first, then 11, then 10; shard 1 is the slower one each time.
  s0->finish(2, 1200, 1.0);
  s1->finish(2, 9999, 5.0);
  s0->finish(1, 1100, 2.0);
  s1->finish(1, 9999, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard lock(log.mu);
    EXPECT_TRUE(log.results.empty()) << "a step came back before step 10";
  }
  s1->finish(0, 9999, 3.0);
  s0->finish(0, 1000, 4.0);
  ASSERT_EQ(log.all.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(log.results.size(), 3u);
  const std::vector<double> device_ms = {4.0, 2.0, 5.0};   // the slower shard's
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = log.results[i];
    EXPECT_EQ(r.step_id, 10 + i);
    EXPECT_TRUE(r.outcome.ok());
    ASSERT_EQ(r.tokens.size(), 1u);
    EXPECT_EQ(r.tokens[0].token_id, static_cast<int32_t>(1000 + 100 * i)) << "shard 0's token";
    EXPECT_EQ(r.device_ms, device_ms[i]);
  }
  EXPECT_EQ(aborts, 0);
}

TEST(executor_group, a_failed_shard_fails_its_step_and_every_later_one_at_once) {
  gpu::executor_info info;
  info.num_blocks = 10;
  auto a = std::make_unique<manual_shard>(info), b = std::make_unique<manual_shard>(info);
  manual_shard *s0 = a.get(), *s1 = b.get();
  std::vector<std::unique_ptr<gpu::executor>> shards;
  shards.push_back(std::move(a));
  shards.push_back(std::move(b));
  std::atomic<int> aborts{0};
  gpu::executor_group group(std::move(shards), [&] { ++aborts; });
  delivery_log log;
  log.expected = 3;
  group.submit(one_seq_step(1), log.sink());
  group.submit(one_seq_step(2), log.sink());
  s1->finish(0, 7, 1.0, make_error(error_code::internal, "shard one broke"));
  for (int i = 0; i < 100 && aborts == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(aborts, 1) << "the collective is aborted as soon as a shard fails";
  group.submit(one_seq_step(3), log.sink());   // refused without reaching the shards
  s0->finish(0, 7, 1.0, make_error(error_code::internal, "collective aborted"));
  s0->finish(1, 8, 1.0);   // the step in flight came back fine from both shards
  s1->finish(1, 8, 1.0);
  ASSERT_EQ(log.all.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(log.results.size(), 3u);
  EXPECT_EQ(log.results[0].step_id, 1u);
  ASSERT_FALSE(log.results[0].outcome.ok());
  EXPECT_EQ(log.results[0].outcome.err().message, "shard one broke") << "the first error, not the echo";
  EXPECT_TRUE(log.results[0].tokens.empty());
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_FALSE(log.results[i].outcome.ok()) << "step " << log.results[i].step_id;
    EXPECT_NE(log.results[i].outcome.err().message.find("shard 1 failed step 1: shard one broke"), std::string::npos)
        << log.results[i].outcome.err().message;
    EXPECT_TRUE(log.results[i].tokens.empty());
  }
  EXPECT_EQ(log.results[2].step_id, 3u);
  EXPECT_EQ(log.results[2].outcome.err().code, error_code::unavailable);
  EXPECT_EQ(aborts, 1);
}

/// An executor that fails the steps `steps` without running them, after `delay`, from its own
/// thread: the other shards are left waiting in the step's first collective.
class dead_shard final : public gpu::executor {
 public:
  dead_shard(std::unique_ptr<gpu::executor> inner, std::vector<uint64_t> steps) : inner_(std::move(inner)), steps_(std::move(steps)) {}
  ~dead_shard() override {
    if (thread_.joinable()) thread_.join();
  }
  const gpu::executor_info& info() const override { return inner_->info(); }
  void submit(gpu::step_batch batch, done_fn done) override {
    if (std::find(steps_.begin(), steps_.end(), batch.step_id) == steps_.end()) {
      inner_->submit(std::move(batch), std::move(done));
      return;
    }
    if (thread_.joinable()) thread_.join();
    thread_ = std::thread([id = batch.step_id, done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      gpu::step_result r;
      r.step_id = id;
      r.outcome = make_error(error_code::internal, "shard lost");
      done(std::move(r));
    });
  }

 private:
  std::unique_ptr<gpu::executor> inner_;
  std::vector<uint64_t> steps_;
  std::thread thread_;
};

gpu::cpu_executor_options two_shards() {
  gpu::cpu_executor_options opts;
  opts.num_blocks = 64;
  opts.threads = 2;
  opts.tensor_parallel_size = 2;
  return opts;
}

TEST(executor_group, a_shard_that_never_joins_the_collective_fails_the_step_without_a_hang) {
  auto made = gpu::make_cpu_executor_group(model_dir("llama-tiny"), two_shards(),
                                           [](int64_t rank, std::unique_ptr<gpu::executor> shard) {
                                             if (rank != 1) return shard;
                                             return std::unique_ptr<gpu::executor>(
                                                 std::make_unique<dead_shard>(std::move(shard), std::vector<uint64_t>{2}));
                                           });
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto& group = *made.value();
  const auto cases = load_reference("llama-tiny");
  gpu::step_batch prefill;
  prefill.step_id = 1;
  prefill.seqs.push_back(greedy_seq(1, 0, cases[0].prompt_ids, block_range(0, 8)));
  const auto first = run_group_step(group, prefill);
  ASSERT_TRUE(first.outcome.ok()) << first.outcome.err().message;
  ASSERT_EQ(first.tokens.size(), 1u);
  EXPECT_EQ(first.tokens[0].token_id, cases[0].greedy_ids[0]);
  // Step 2: shard 0 computes and waits in its first all-reduce for shard 1, which fails instead.
  gpu::step_batch decode;
  decode.step_id = 2;
  decode.seqs.push_back(greedy_seq(1, static_cast<int32_t>(cases[0].prompt_ids.size()), {gpu::previous_token},
                                   block_range(0, 8)));
  const auto t0 = std::chrono::steady_clock::now();
  const auto failed = run_group_step(group, decode);
  ASSERT_FALSE(failed.outcome.ok());
  EXPECT_EQ(failed.outcome.err().message, "shard lost");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  decode.step_id = 3;
  const auto refused = run_group_step(group, decode);
  ASSERT_FALSE(refused.outcome.ok());
  EXPECT_EQ(refused.outcome.err().code, error_code::unavailable);
  EXPECT_NE(refused.outcome.err().message.find("shard 1 failed step 2: shard lost"), std::string::npos)
      << refused.outcome.err().message;
}

TEST(executor_group, an_injected_failure_in_one_shard_fails_the_step_and_shutdown_answers_the_steps_in_flight) {
  auto made = gpu::make_cpu_executor_group(model_dir("llama-tiny"), two_shards(),
                                           [](int64_t rank, std::unique_ptr<gpu::executor> shard) {
                                             return rank == 0 ? gpu::inject_step_failures(std::move(shard), {2})
                                                              : std::move(shard);
                                           });
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto group = std::move(made).value();
  const auto cases = load_reference("llama-tiny");
  delivery_log log;
  log.expected = 6;
  for (uint64_t id = 1; id <= 6; ++id) {
    gpu::step_batch b;
    b.step_id = id;
    b.seqs.push_back(greedy_seq(id, 0, cases[id % cases.size()].prompt_ids, block_range(static_cast<int32_t>(8 * id), 8)));
    group->submit(std::move(b), log.sink());
  }
  auto delivered = [&] {
    std::lock_guard lock(log.mu);
    return log.results.size();
  };
  for (int i = 0; i < 3000 && delivered() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(delivered(), 2u);
  group.reset();   // aborts the collective with steps still queued or running; answers every one
  ASSERT_EQ(log.all.get_future().wait_for(std::chrono::seconds(0)), std::future_status::ready);
  ASSERT_EQ(log.results.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(log.results[i].step_id, i + 1);
  EXPECT_TRUE(log.results[0].outcome.ok()) << log.results[0].outcome.err().message;
  ASSERT_FALSE(log.results[1].outcome.ok());
  EXPECT_EQ(log.results[1].outcome.err().message, "injected failure at step 2");
  for (size_t i = 2; i < 6; ++i) EXPECT_FALSE(log.results[i].outcome.ok()) << "step " << i + 1;
}

}  // namespace
}  // namespace actorserve::testing
