// The CUDA executor split over two tensor-parallel shards (--tensor-parallel-size 2) against one
// executor holding the whole model: both shards on ONE device (the one-shot all-reduce of ranks
// sharing a GPU), and on two devices (NCCL) where two are visible. Each step goes to both shards
// in rank order, as the lock-step group issues it. Every fixture's reference cases: the shards'
// kept logits bitwise equal (both sample from the same gathered logits), within bf16 noise of the
// unsplit executor's, and the greedy tokens equal to the reference's up to its first small
// margin, as executor_reference_test.cpp checks them; eager steps and CUDA-graph decode steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "config/model_config.hpp"
#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cuda/parallel/collective_group.hpp"
#include "gpu/cuda/parallel/shard_executors.hpp"
#include "reference_json.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using shard_list = std::vector<std::unique_ptr<gpu::executor>>;

/// Shard r of devices.size() on devices[r], each with `opts`; empty (the test failed) on an error.
shard_list start_shards(const std::string& dir, const gpu::cuda_executor_options& opts, const std::vector<int>& devices) {
  auto made = cuda::make_device_collectives(devices, {});
  EXPECT_TRUE(made.ok()) << made.err().message;
  if (!made) return {};
  std::vector<std::shared_ptr<cuda::device_collective>> collectives;
  for (auto& c : made.value()) collectives.push_back(std::move(c));
  auto shards = cuda::start_shard_executors(dir, opts, devices, collectives);
  EXPECT_TRUE(shards.ok()) << shards.err().message;
  return shards ? std::move(shards).value() : shard_list{};
}

/// One step on every shard, submitted in rank order from this thread (a shard's submit returns
/// once the step is enqueued), then waited for; every shard's sampled tokens and kept logits must
/// be the same. Shard 0's result.
gpu::step_result run_step_on_shards(shard_list& shards, const gpu::step_batch& b) {
  std::vector<std::promise<gpu::step_result>> done(shards.size());
  for (size_t r = 0; r < shards.size(); ++r)
    shards[r]->submit(b, [&done, r](gpu::step_result res) { done[r].set_value(std::move(res)); });
  std::vector<gpu::step_result> results;
  for (auto& d : done) results.push_back(d.get_future().get());
  const auto* first = dynamic_cast<gpu::cuda_executor_probe*>(shards[0].get());
  for (size_t r = 1; r < shards.size(); ++r) {
    EXPECT_EQ(results[r].outcome.ok(), results[0].outcome.ok()) << "shard " << r;
    if (!results[r].outcome.ok() || !results[0].outcome.ok()) continue;
    EXPECT_EQ(results[r].tokens.size(), results[0].tokens.size()) << "shard " << r;
    for (size_t i = 0; i < std::min(results[r].tokens.size(), results[0].tokens.size()); ++i)
      EXPECT_EQ(results[r].tokens[i].token_id, results[0].tokens[i].token_id) << "shard " << r << " row " << i;
    const auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(shards[r].get());
    EXPECT_TRUE(probe->last_logits() == first->last_logits()) << "shard " << r << ": logits differ from shard 0's";
  }
  return std::move(results[0]);
}

struct tp_case {
  std::string model;
  bool eager;
};

std::string tp_case_name(const ::testing::TestParamInfo<tp_case>& info) {
  std::string s = info.param.model + (info.param.eager ? "_eager" : "_graphs");
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

/// The reference cases through `whole` (one executor) and `shards`: shard logits against the
/// whole executor's, shard greedy tokens (fed back) against the reference's.
void expect_shards_match(const std::string& model, gpu::executor& whole, shard_list& shards, bool eager) {
  const std::string dir = model_dir(model);
  const auto cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 8u) << dir;
  auto cfg = load_model_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const bool routed = cfg->moe.has_value();
  auto* whole_probe = dynamic_cast<gpu::cuda_executor_probe*>(&whole);
  auto* shard_probe = dynamic_cast<gpu::cuda_executor_probe*>(shards[0].get());
  ASSERT_TRUE(whole_probe && shard_probe);
  ASSERT_EQ(whole.info().vocab_size, shards[0]->info().vocab_size);
  int32_t num_blocks = whole.info().num_blocks;   // block ids every executor's pool holds
  for (auto& s : shards) num_blocks = std::min(num_blocks, s->info().num_blocks);
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(11);
  int rows = 0, rows_over = 0, matched_total = 0, compared_total = 0;
  double worst = 0;
  for (const ref_case& c : cases) {
    std::shuffle(perm.begin(), perm.end(), rng);
    const int len = int(c.prompt_ids.size()), steps = int(c.greedy_ids.size());
    const std::vector<int32_t> blocks(perm.begin(), perm.begin() + (len + steps + 15) / 16);
    std::vector<int32_t> gen;
    for (int k = 0; k < steps; ++k) {
      gpu::step_batch b;
      b.step_id = uint64_t(k);
      b.seqs.push_back(k == 0 ? greedy(1, 0, c.prompt_ids, blocks) : greedy(1, len + k - 1, {gen.back()}, blocks));
      const gpu::step_result split = run_step_on_shards(shards, b);
      ASSERT_TRUE(split.outcome.ok()) << split.outcome.err().message;
      const gpu::step_result one = run_step(whole, b);
      ASSERT_TRUE(one.outcome.ok()) << one.outcome.err().message;
      const double err = rel_max_err(shard_probe->last_logits().at(0), whole_probe->last_logits().at(0));
      worst = std::max(worst, err);
      ++rows;
      rows_over += err >= logits_bound;
      EXPECT_LT(err, routed ? rerouted_logits_bound : logits_bound) << model << " prompt " << len << " step " << k;
      gen.push_back(split.tokens.at(0).token_id);
    }
    int matched = 0, comparable = 0;
    while (comparable < steps && c.margins[comparable] >= 5e-2) ++comparable;
    for (int k = 0; k < comparable; ++k) {
      EXPECT_EQ(gen[k], c.greedy_ids[k]) << model << " prompt length " << len << " step " << k;
      if (gen[k] != c.greedy_ids[k]) break;
      ++matched;
    }
    matched_total += matched;
    compared_total += comparable;
  }
  std::printf("%s over 2 shards (%s): worst logits error against one executor %.3g (%d of %d rows beyond %g); "
              "greedy steps matched %d of %d comparable; graph replays %lld\n",
              model.c_str(), eager ? "eager" : "graphs", worst, rows_over, rows, logits_bound, matched_total,
              compared_total, (long long)shard_probe->graph_replays());
  EXPECT_LE(rows_over, routed ? rerouted_rows_allowed(rows) : 0) << model;
  if (eager) {
    EXPECT_EQ(shard_probe->graph_replays(), 0);
  } else {
    for (auto& s : shards) EXPECT_GT(dynamic_cast<gpu::cuda_executor_probe*>(s.get())->graph_replays(), 0);
  }
}

/// The sharded fixtures: dense (grouped KV heads split), dense with a tied-free lm_head, routed
/// experts (a tied embedding; one KV head replicated on both shards) and latent attention with
/// shared experts.
std::vector<tp_case> tp_cases() {
  std::vector<tp_case> out;
  for (const char* m : {"qwen3-hd128-bf16", "llama-hd128-bf16", "qwen3-moe-bf16", "mixtral-bf16",
                        "deepseek-v2-qlora-yarn-bf16"})
    for (bool eager : {false, true}) out.push_back({m, eager});
  return out;
}

class CudaTensorParallel : public ::testing::TestWithParam<tp_case> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

/// The case's model whole and over one shard per entry of `devices`.
void expect_split_matches(const tp_case& c, const std::vector<int>& devices) {
  const gpu::cuda_executor_options opts = test_options(c.eager);
  auto whole = gpu::make_cuda_executor(model_dir(c.model), opts);
  ASSERT_TRUE(whole.ok()) << whole.err().message;
  shard_list shards = start_shards(model_dir(c.model), opts, devices);
  ASSERT_EQ(shards.size(), devices.size());
  expect_shards_match(c.model, *whole.value(), shards, c.eager);
}

TEST_P(CudaTensorParallel, TwoShardsOnOneDeviceMatchOneExecutor) { expect_split_matches(GetParam(), {0, 0}); }

TEST_P(CudaTensorParallel, TwoShardsOnTwoDevicesMatchOneExecutor) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  expect_split_matches(GetParam(), {0, 1});
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallel, ::testing::ValuesIn(tp_cases()), tp_case_name);

TEST(CudaTensorParallelRefusals, BlockScaledWeightsCutByTheShardsAreRefusedNamingTheFlag) {
  AS_REQUIRE_CUDA();
  auto made = cuda::make_device_collectives({0, 0}, {});
  ASSERT_TRUE(made.ok()) << made.err().message;
  std::vector<std::shared_ptr<cuda::device_collective>> collectives;
  for (auto& c : made.value()) collectives.push_back(std::move(c));
  // mixtral-fp8-block: 32-row heads in 128 x 128 scale blocks.
  auto shards = cuda::start_shard_executors(model_dir("mixtral-fp8-block"), test_options(), {0, 0}, collectives);
  ASSERT_FALSE(shards.ok());
  EXPECT_NE(shards.err().message.find("--tensor-parallel-size 2"), std::string::npos) << shards.err().message;
  EXPECT_NE(shards.err().message.find("scale blocks"), std::string::npos) << shards.err().message;
}

}  // namespace
}  // namespace actorserve::testing
