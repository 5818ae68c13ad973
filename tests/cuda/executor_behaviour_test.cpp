// CUDA executor behaviour: graphs agree with eager, copy-on-write block copies, bad steps fail
// cleanly without killing the executor, memory planning and its out-of-memory error, fp16.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "config/model_config.hpp"
#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class CudaExecutor : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

/// 20 sequences (decode bucket 24) through prefill and 12 decode steps; tokens and logits.
std::pair<std::vector<std::vector<int32_t>>, std::vector<std::vector<float>>> run_batch(gpu::executor& ex) {
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::mt19937 rng(3);
  const int n = 20;
  std::vector<std::vector<int32_t>> out(n);
  std::vector<std::vector<float>> logits;
  gpu::step_batch b;
  std::vector<int> lens;
  for (int s = 0; s < n; ++s) {
    const int len = 3 + int(rng() % 60);
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = int32_t(rng() % 1000);
    b.seqs.push_back(greedy(uint64_t(s), 0, p, {s * 8, s * 8 + 1, s * 8 + 2, s * 8 + 3, s * 8 + 4}));
    lens.push_back(len);
  }
  auto r = run_step(ex, b);
  EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  for (int s = 0; s < n; ++s) out[s].push_back(r.tokens.at(s).token_id);
  for (int k = 0; k < 12; ++k) {
    gpu::step_batch d;
    for (int s = 0; s < n; ++s)
      d.seqs.push_back(greedy(uint64_t(s), lens[s] + k, {out[s].back()}, b.seqs[s].block_table));
    auto rd = run_step(ex, d);
    EXPECT_TRUE(rd.outcome.ok()) << rd.outcome.err().message;
    for (int s = 0; s < n; ++s) out[s].push_back(rd.tokens.at(s).token_id);
    for (auto& row : probe->last_logits()) logits.push_back(row);
  }
  return {out, logits};
}

TEST_F(CudaExecutor, DecodeGraphsMatchEager) {
  // A dense model, and one with experts (the router, permutation and grouped GEMM captured).
  for (const char* model : {"llama-hd128-bf16", "qwen3-moe-bf16"}) {
    const std::string dir = model_dir(model);
    auto eager = gpu::make_cuda_executor(dir, test_options(true));
    auto graphs = gpu::make_cuda_executor(dir, test_options(false));
    ASSERT_TRUE(eager.ok() && graphs.ok()) << model;
    auto [te, le] = run_batch(*eager.value());
    auto [tg, lg] = run_batch(*graphs.value());
    EXPECT_EQ(te, tg) << model;
    ASSERT_EQ(le.size(), lg.size());
    double worst = 0;
    for (size_t i = 0; i < le.size(); ++i) worst = std::max(worst, rel_max_err(lg[i], le[i]));
    std::printf("%s graphs vs eager, 20 sequences x 12 decode steps: logits max abs err / max abs ref %.3g; "
                "replays %lld\n", model, worst,
                (long long)dynamic_cast<gpu::cuda_executor_probe*>(graphs.value().get())->graph_replays());
    EXPECT_LT(worst, 1e-2) << model;
    EXPECT_EQ(dynamic_cast<gpu::cuda_executor_probe*>(eager.value().get())->graph_replays(), 0);
    EXPECT_GE(dynamic_cast<gpu::cuda_executor_probe*>(graphs.value().get())->graph_replays(), 12);
  }
}

TEST_F(CudaExecutor, CopyOnWriteBlocksForkASequence) {
  auto made = gpu::make_cuda_executor(model_dir("qwen2-tiny"), test_options(true));
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& ex = *made.value();
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::vector<int32_t> prompt(40);
  std::iota(prompt.begin(), prompt.end(), 100);
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, prompt, {10, 11, 12}));
  ASSERT_TRUE(run_step(ex, b).outcome.ok());
  // Fork: B shares blocks 10 and 11 and gets a copy of the partly filled block 12 in 20.
  gpu::step_batch d;
  d.block_copies = {{12, 20}};
  d.seqs.push_back(greedy(1, 40, {7}, {10, 11, 12}));
  d.seqs.push_back(greedy(2, 40, {7}, {10, 11, 20}));
  auto r = run_step(ex, d);
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  const auto l = probe->last_logits();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_LT(rel_max_err(l[0], l[1]), 1e-5);
  EXPECT_EQ(r.tokens[0].token_id, r.tokens[1].token_id);
}

TEST_F(CudaExecutor, BadStepsFailAndTheExecutorContinues) {
  auto made = gpu::make_cuda_executor(model_dir("llama-tiny"), test_options());
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& ex = *made.value();
  gpu::step_batch bad;
  bad.seqs.push_back(greedy(1, 0, {1, 2, 3}, {100000}));
  auto r = run_step(ex, bad);
  EXPECT_FALSE(r.outcome.ok());
  gpu::step_batch bad_token;
  bad_token.seqs.push_back(greedy(1, 0, {5000000}, {0}));
  EXPECT_FALSE(run_step(ex, bad_token).outcome.ok());
  gpu::step_batch good;
  good.seqs.push_back(greedy(1, 0, {1, 2, 3}, {0}));
  auto g = run_step(ex, good);
  EXPECT_TRUE(g.outcome.ok()) << g.outcome.err().message;
  EXPECT_EQ(g.tokens.size(), 1u);
  EXPECT_GT(g.device_ms, 0.0);
}

TEST_F(CudaExecutor, ManyStepsInFlightCompleteInOrder) {
  auto made = gpu::make_cuda_executor(model_dir("llama-tiny"), test_options());
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& ex = *made.value();
  std::mutex mu;
  std::vector<uint64_t> order;
  std::promise<void> all;
  const int steps = 50;
  for (int k = 0; k < steps; ++k) {
    gpu::step_batch b;
    b.step_id = uint64_t(k);
    b.seqs.push_back(greedy(uint64_t(k), 0, {1, 2, 3, int32_t(k)}, {k}));
    ex.submit(std::move(b), [&](gpu::step_result r) {
      std::lock_guard lock(mu);
      EXPECT_TRUE(r.outcome.ok());
      order.push_back(r.step_id);
      if (int(order.size()) == steps) all.set_value();
    });
  }
  all.get_future().wait();
  std::vector<uint64_t> want(steps);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(order, want);
}

TEST_F(CudaExecutor, PlansTheKvPoolFromMemoryUtilization) {
  auto o = test_options();
  o.num_blocks_override.reset();
  o.gpu_memory_utilization = 0.05;
  auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  ASSERT_TRUE(made.ok()) << made.err().message;
  const auto& info = made.value()->info();
  std::printf("utilization 0.05: %d KV blocks of %d tokens\n", info.num_blocks, info.block_size);
  EXPECT_GT(info.num_blocks, 2048 / 16);
  o.gpu_memory_utilization = 1e-6;
  auto tiny = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.err().code, error_code::out_of_memory);
  std::printf("utilization 1e-6: %s\n", tiny.err().message.c_str());
}

/// Bytes of one KV block of llama-hd128-bf16 (2 layers, 2 KV heads of 128) from its config.json:
/// K and V of every layer, `element_bytes` an element.
int64_t hd128_block_bytes(int64_t block_size, int64_t element_bytes) {
  auto c = load_model_config(model_dir("llama-hd128-bf16"));
  EXPECT_TRUE(c.ok());
  return 2 * c->num_layers * block_size * c->num_kv_heads * c->head_dim * element_bytes;
}

TEST_F(CudaExecutor, PlansTheKvPoolFromMemoryBytes) {
  // --kv-cache-memory-bytes: floor(bytes / block) blocks, whatever else holds device memory.
  auto o = test_options();
  o.num_blocks_override.reset();
  o.kv_layout = kv_cache_layout::flash_decoding;
  o.block_size = 64;
  const int64_t block = hd128_block_bytes(64, 2);
  for (int64_t blocks : {int64_t{32}, int64_t{1000}}) {
    o.kv_cache_memory_bytes = blocks * block + block - 1;
    auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
    ASSERT_TRUE(made.ok()) << made.err().message;
    EXPECT_EQ(made.value()->info().num_blocks, blocks);
  }
  // 31 blocks cannot hold one sequence of --max-model-len 2048 (32 blocks of 64).
  o.kv_cache_memory_bytes = 32 * block - 1;
  auto small = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.err().code, error_code::out_of_memory);
  EXPECT_NE(small.err().message.find("raise --kv-cache-memory-bytes"), std::string::npos) << small.err().message;
  // More than any GPU has: the allocation fails, naming the flag.
  o.kv_cache_memory_bytes = int64_t{1} << 44;
  auto huge = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.err().code, error_code::out_of_memory);
  EXPECT_NE(huge.err().message.find("--kv-cache-memory-bytes"), std::string::npos) << huge.err().message;
  std::printf("16 TiB of KV cache: %s\n", huge.err().message.c_str());
}

TEST_F(CudaExecutor, Fp8KvCacheHoldsTwiceTheBlocks) {
  // --kv-cache-dtype fp8: one byte a K/V element, so the same bytes hold exactly twice the blocks.
  // The pool is a byte size, not a share of free memory, so other processes on the GPU (other
  // test shards) change nothing.
  auto o = test_options();
  o.num_blocks_override.reset();
  o.kv_cache_memory_bytes = int64_t{256} << 20;
  o.kv_layout = kv_cache_layout::flash_decoding;
  o.block_size = 64;
  int32_t bf16_blocks = 0, fp8_blocks = 0;
  for (bool fp8 : {false, true}) {
    o.kv_cache_fp8 = fp8;
    auto made = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), o);
    ASSERT_TRUE(made.ok()) << made.err().message;
    (fp8 ? fp8_blocks : bf16_blocks) = made.value()->info().num_blocks;
  }
  std::printf("256 MiB, 64-token blocks: %d bf16 blocks, %d FP8 blocks\n", bf16_blocks, fp8_blocks);
  EXPECT_EQ(bf16_blocks, *o.kv_cache_memory_bytes / hd128_block_bytes(64, 2));
  EXPECT_EQ(fp8_blocks, *o.kv_cache_memory_bytes / hd128_block_bytes(64, 1));
  EXPECT_EQ(fp8_blocks, 2 * bf16_blocks) << "256 MiB is a whole number of bf16 blocks";
}

TEST_F(CudaExecutor, Float16MatchesReferenceLogits) {
  auto o = test_options(true);
  o.dtype = dtype_choice::float16;
  auto made = gpu::make_cuda_executor(model_dir("mistral-tiny"), o);
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto bf = test_options(true);
  auto made_bf = gpu::make_cuda_executor(model_dir("mistral-tiny"), bf);
  ASSERT_TRUE(made_bf.ok()) << made_bf.err().message;
  std::vector<int32_t> prompt(97);
  std::iota(prompt.begin(), prompt.end(), 3);
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, prompt, {0, 1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(run_step(*made.value(), b).outcome.ok());
  ASSERT_TRUE(run_step(*made_bf.value(), b).outcome.ok());
  const auto l16 = dynamic_cast<gpu::cuda_executor_probe*>(made.value().get())->last_logits();
  const auto lbf = dynamic_cast<gpu::cuda_executor_probe*>(made_bf.value().get())->last_logits();
  const double err = rel_max_err(l16.at(0), lbf.at(0));
  std::printf("fp16 vs bf16 logits max abs err / max abs ref %.3g\n", err);
  EXPECT_LT(err, 3e-2);
}

TEST_F(CudaExecutor, RefusesAtStartWhatItWouldComputeWrongly) {
  // DeepSeek-V2 (latent attention, group-limited routing, shared experts) runs on the device.
  auto latent = gpu::make_cuda_executor(model_dir("deepseek-v2-tiny"), test_options());
  EXPECT_TRUE(latent.ok()) << latent.err().message;
  // FP8 checkpoints run too (dense layers in E4M3; docs/fp8.md).
  auto fp8 = gpu::make_cuda_executor(model_dir("qwen3-hd128-fp8"), test_options());
  EXPECT_TRUE(fp8.ok()) << fp8.err().message;
  // The FP8 KV cache where no kernel reads it: the vLLM layout, latent attention, the generic
  // kernel's head dims (the model-support check refuses the same before the executor is made:
  // tests/model/cuda_model_support_test.cpp).
  auto fp8_kv = test_options();
  fp8_kv.kv_cache_fp8 = true;
  auto vllm = gpu::make_cuda_executor(model_dir("llama-hd128-bf16"), fp8_kv);
  ASSERT_FALSE(vllm.ok());
  EXPECT_NE(vllm.err().message.find("--paged-kv-cache-type flash-decoding"), std::string::npos) << vllm.err().message;
  fp8_kv.kv_layout = kv_cache_layout::flash_decoding;
  fp8_kv.block_size = 64;
  auto latent_fp8 = gpu::make_cuda_executor(model_dir("deepseek-v2-tiny"), fp8_kv);
  ASSERT_FALSE(latent_fp8.ok());
  EXPECT_NE(latent_fp8.err().message.find("--kv-cache-dtype fp8"), std::string::npos) << latent_fp8.err().message;
  auto generic = gpu::make_cuda_executor(model_dir("llama-tiny"), fp8_kv);
  ASSERT_FALSE(generic.ok());
  EXPECT_NE(generic.err().message.find("--kv-cache-dtype fp8"), std::string::npos) << generic.err().message;
  // A sliding window shorter than the context runs, on both layouts (the generic kernel here).
  for (kv_cache_layout layout : {kv_cache_layout::vllm, kv_cache_layout::flash_decoding}) {
    auto o = test_options();
    o.kv_layout = layout;
    o.block_size = layout == kv_cache_layout::vllm ? 16 : 64;
    auto windowed = gpu::make_cuda_executor(model_dir("mistral-sliding-window"), o);
    EXPECT_TRUE(windowed.ok()) << to_string(layout) << ": " << windowed.err().message;
  }
}

}  // namespace
}  // namespace actorserve::testing
