// The executor factory's CUDA refusals read the model from --model and the context from
// --max-model-len, and name the model directory (checked without a GPU).
#include <gtest/gtest.h>

#include "engine_harness.hpp"
#include "gpu/executor_factory.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;

TEST(executor_factory, cuda_support_reads_the_model_and_max_model_len) {
  auto cfg = tiny_config();
  EXPECT_TRUE(gpu::check_cuda_support(cfg).ok());
  cfg.model.model_dir = actorserve::testing::model_dir("mistral-sliding-window");
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
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("latent attention"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("--device cpu"), std::string::npos) << st.err().message;
  cfg.model.model_dir = "/nonexistent";
  st = gpu::check_cuda_support(cfg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("/nonexistent/config.json"), std::string::npos) << st.err().message;
}

}  // namespace
}  // namespace actorserve::actors
