// The executor factory's CUDA refusals read the model from --model and the context from
// --max-model-len, and name the model directory (checked without a GPU); tensor- and
// expert-parallel shards run on the CPU only.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "engine_harness.hpp"
#include "gpu/executor_factory.hpp"
#include "scratch_dir.hpp"
#ifdef ACTORSERVE_HAS_CUDA
#include "gpu/cuda/device_info.hpp"
#endif

namespace actorserve::actors {
namespace {

using namespace actors::testing;
using actorserve::testing::scratch_dir;

/// A model directory holding deepseek-v2-tiny's config.json with a 48-key sliding window, which
/// its latent attention cannot apply (the CUDA executor refuses it below --max-model-len 49).
scratch_dir windowed_latent_model_dir() {
  scratch_dir dir("windowed_latent");
  std::ifstream in(actorserve::testing::model_dir("deepseek-v2-tiny") + "/config.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json.insert(json.find('{') + 1, R"("use_sliding_window": true, "sliding_window": 48,)");
  std::ofstream(dir / "config.json") << json;
  return dir;
}

TEST(executor_factory, cuda_support_reads_the_model_and_max_model_len) {
  auto cfg = tiny_config();
  EXPECT_TRUE(gpu::check_cuda_support(cfg).ok());
  cfg.model.model_dir = actorserve::testing::model_dir("mistral-sliding-window");
  EXPECT_TRUE(gpu::check_cuda_support(cfg).ok());  // the attention backends mask the window
  const scratch_dir windowed_latent = windowed_latent_model_dir();
  cfg.model.model_dir = windowed_latent.path().string();
  status st = gpu::check_cuda_support(cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find(cfg.model.model_dir), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("--max-model-len 48"), std::string::npos) << st.err().message;
  cfg.model.max_model_len = 48;
  EXPECT_TRUE(gpu::check_cuda_support(cfg).ok());
  cfg.model.model_dir = actorserve::testing::model_dir("qwen3-moe-tiny");
  EXPECT_TRUE(gpu::check_cuda_support(cfg).ok());
  cfg.model.model_dir = actorserve::testing::model_dir("deepseek-v2-tiny");
  st = gpu::check_cuda_support(cfg);
  EXPECT_TRUE(st.ok()) << st.err().message;  // latent attention runs on the CUDA executor
  cfg.model.model_dir = actorserve::testing::model_dir("qwen3-hd128-fp8");
  st = gpu::check_cuda_support(cfg);
  EXPECT_TRUE(st.ok()) << st.err().message;  // FP8 dense weights run on the CUDA executor
  cfg.cache.cache_dtype = kv_cache_dtype::fp8;  // the FP8 KV cache does not yet
  st = gpu::check_cuda_support(cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("--kv-cache-dtype fp8"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("--device cpu"), std::string::npos) << st.err().message;
  cfg.cache.cache_dtype = kv_cache_dtype::auto_detect;
  cfg.model.model_dir = "/nonexistent";
  st = gpu::check_cuda_support(cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("/nonexistent/config.json"), std::string::npos) << st.err().message;
}

TEST(executor_factory, tensor_parallel_shards_run_on_the_cpu_and_need_a_gpu_each_on_cuda) {
  auto cfg = tiny_config();
  cfg.executor.device = device_kind::cpu;
  cfg.executor.tensor_parallel_size = 2;
  auto ex = gpu::make_executor(cfg);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  EXPECT_EQ(ex.value()->info().name, "cpu");
  cfg.executor.tensor_parallel_size = 3;   // the fixture's 4 heads do not split over 3
  ex = gpu::make_executor(cfg);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.err().message.find("--tensor-parallel-size 3"), std::string::npos) << ex.err().message;
#ifdef ACTORSERVE_HAS_CUDA
  // One shard per GPU: more shards than visible GPUs are refused naming the flag and the count.
  const int visible = gpu::cuda::device_count();
  if (visible < 2) {
    cfg.executor.device = device_kind::cuda;
    cfg.executor.tensor_parallel_size = 2;
    ex = gpu::make_executor(cfg);
    ASSERT_FALSE(ex.ok());
    EXPECT_NE(ex.err().message.find("--tensor-parallel-size 2: the CUDA executor runs one shard per GPU"),
              std::string::npos)
        << ex.err().message;
    EXPECT_NE(ex.err().message.find(std::to_string(visible) + " GPU(s) are visible"), std::string::npos)
        << ex.err().message;
  }
#endif
}

TEST(executor_factory, expert_parallel_shards_run_on_the_cpu_for_moe_models_only) {
  auto cfg = tiny_config(std::nullopt, true, "mixtral-tiny");
  cfg.executor.device = device_kind::cpu;
  cfg.executor.tensor_parallel_size = 2;
  cfg.executor.enable_expert_parallel = true;
  auto ex = gpu::make_executor(cfg);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  EXPECT_EQ(ex.value()->info().num_experts, 4);
  cfg.model.model_dir = actorserve::testing::model_dir("llama-tiny");
  ex = gpu::make_executor(cfg);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.err().message.find("--enable-expert-parallel: LlamaForCausalLM has no routed experts"),
            std::string::npos)
      << ex.err().message;
  cfg.model.model_dir = actorserve::testing::model_dir("mixtral-tiny");
  cfg.executor.device = device_kind::cuda;
  cfg.executor.tensor_parallel_size = 1;
  ex = gpu::make_executor(cfg);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.err().message.find("--enable-expert-parallel: the CUDA executor splits every expert"),
            std::string::npos)
      << ex.err().message;
}

}  // namespace
}  // namespace actorserve::actors
