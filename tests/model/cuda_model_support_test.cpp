// What the CUDA executor refuses at start, decided on the host: the FP8 KV cache where no kernel
// reads it (the vLLM layout, latent attention, the generic kernel's head dims) and a sliding window
// smaller than the context on latent attention; each message names the way around. Mistral's
// window, Qwen3's q/k norm, Mixtral, Qwen3-MoE, DeepSeek-V2 (latent attention, its routing and
// shared experts), YaRN rope and FP8 checkpoints run, DeepSeek-V2 from an FP8 checkpoint too.
#include <gtest/gtest.h>

#include "config/engine_config.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda_model_support.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

std::string refusal(const std::string& model, int64_t max_model_len = 0) {
  auto cfg = load_model_config(model_dir(model));
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.err().message);
  if (!cfg.ok()) return "no config";
  status st = gpu::check_cuda_model_support(cfg.value(), max_model_len);
  if (st.ok()) return "";
  EXPECT_EQ(st.err().code, error_code::unsupported);
  return st.err().message;
}

void expect_has(const std::string& msg, const std::vector<std::string>& needles) {
  ASSERT_FALSE(msg.empty()) << "not refused";
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

TEST(cuda_model_support, runs_the_llama_family_without_a_window) {
  for (const char* m : {"llama-tiny", "llama-hd128-bf16", "qwen2-tiny", "mistral-tiny"}) EXPECT_EQ(refusal(m), "") << m;
}

TEST(cuda_model_support, runs_mixtral_and_qwen3_moe) {
  for (const char* m : {"mixtral-tiny", "mixtral-bf16", "qwen3-moe-tiny", "qwen3-moe-bf16"}) EXPECT_EQ(refusal(m), "") << m;
}

TEST(cuda_model_support, runs_group_limited_routing_and_shared_experts) {
  auto cfg = load_model_config(model_dir("qwen3-moe-tiny"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  auto deepseek_moe = cfg.value();
  deepseek_moe.moe->topk_method = moe_topk_method::group_limited_greedy;
  deepseek_moe.moe->num_shared_experts = 2;
  EXPECT_TRUE(gpu::check_cuda_model_support(deepseek_moe, 0).ok());
}

TEST(cuda_model_support, runs_qwen3_with_its_qk_norm) {
  for (const char* m : {"qwen3-tiny", "qwen3-hd128-bf16"}) EXPECT_EQ(refusal(m), "") << m;
}

TEST(cuda_model_support, runs_deepseek_v2) {
  for (const char* m : {"deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"})
    EXPECT_EQ(refusal(m), "") << m;
}

TEST(cuda_model_support, runs_yarn_rope) {
  auto cfg = load_model_config(model_dir("llama-tiny"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  cfg->rope.kind = rope_kind::yarn;
  cfg->rope.factor = 4.0;
  EXPECT_TRUE(gpu::check_cuda_model_support(cfg.value(), 0).ok());
}

TEST(cuda_model_support, runs_a_window_smaller_than_the_context) {
  // max_position_embeddings 2048, sliding_window 48: the attention backends mask the window.
  for (int64_t len : {0, 4096, 49, 48, 16}) EXPECT_EQ(refusal("mistral-sliding-window", len), "") << len;
}

TEST(cuda_model_support, refuses_a_window_on_latent_attention_and_says_how_long_a_context_runs) {
  // DeepSeek-V2 sets no window; one given to its latent attention (which has none) is refused.
  auto cfg = load_model_config(model_dir("deepseek-v2-tiny"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  cfg->sliding_window = 48;
  const status st = gpu::check_cuda_model_support(cfg.value(), 2048);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, error_code::unsupported);
  expect_has(st.err().message, {"sliding_window 48", "--max-model-len 2048", "latent attention", "--max-model-len 48",
                                "--device cpu"});
  EXPECT_TRUE(gpu::check_cuda_model_support(cfg.value(), 48).ok());
}

}  // namespace
}  // namespace actorserve::testing

namespace actorserve::testing {
namespace {

TEST(cuda_model_support, runs_fp8_checkpoints_of_every_format) {
  for (const char* m : {"qwen3-hd128-fp8", "qwen3-hd128-fp8-channel", "mixtral-fp8-block"})
    EXPECT_EQ(refusal(m), "") << m;
}

TEST(cuda_model_support, runs_deepseek_v2_from_an_fp8_checkpoint) {
  // Its latent-attention projections and experts are dequantized at load; o_proj and the dense
  // layers' MLPs stay E4M3 where the checkpoint scales them per tensor or per channel.
  auto fp8 = load_model_config(model_dir("mixtral-fp8-block"));
  ASSERT_TRUE(fp8.ok()) << fp8.err().message;
  ASSERT_TRUE(fp8->quantization.has_value());
  for (const char* m : {"deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16"}) {
    auto cfg = load_model_config(model_dir(m));
    ASSERT_TRUE(cfg.ok()) << cfg.err().message;
    cfg->quantization = fp8->quantization;
    EXPECT_TRUE(gpu::check_cuda_model_support(cfg.value(), 0).ok()) << m;
  }
}

/// check_cuda_fp8_options for the fixture `model`: "" when accepted, else the message.
std::string fp8_kv_refusal(const std::string& model, kv_cache_layout layout) {
  auto cfg = load_model_config(model_dir(model));
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.err().message);
  if (!cfg.ok()) return "no config";
  EXPECT_TRUE(gpu::check_cuda_fp8_options(cfg.value(), layout, false).ok()) << model;
  status st = gpu::check_cuda_fp8_options(cfg.value(), layout, true);
  if (st.ok()) return "";
  EXPECT_EQ(st.err().code, error_code::unsupported);
  return st.err().message;
}

TEST(cuda_model_support, runs_the_fp8_kv_cache_on_flash_decoding) {
  EXPECT_EQ(fp8_kv_refusal("llama-hd128-bf16", kv_cache_layout::flash_decoding), "");
}

TEST(cuda_model_support, refuses_the_fp8_kv_cache_where_no_kernel_reads_it) {
  // The vLLM layout, latent attention and the generic kernel's head dims: each names the flag and
  // the way around.
  expect_has(fp8_kv_refusal("llama-hd128-bf16", kv_cache_layout::vllm),
             {"--kv-cache-dtype fp8", "--paged-kv-cache-type flash-decoding", "--kv-cache-dtype auto"});
  expect_has(fp8_kv_refusal("deepseek-v2-tiny", kv_cache_layout::flash_decoding),
             {"--kv-cache-dtype fp8", "latent", "--kv-cache-dtype auto"});
  expect_has(fp8_kv_refusal("llama-tiny", kv_cache_layout::flash_decoding),
             {"--kv-cache-dtype fp8", "head_dim 16", "--kv-cache-dtype auto", "--device cpu"});
}

int64_t dense_width(const std::string& model, int64_t shared_width = 0) {
  auto cfg = load_model_config(model_dir(model));
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.err().message);
  return cfg.ok() ? gpu::dense_mlp_width(cfg.value(), shared_width) : -1;
}

TEST(cuda_model_support, dense_mlp_buffers_are_as_wide_as_the_dense_mlps_that_run) {
  // Dense models and MoE models with a dense layer (Qwen3-MoE's mlp_only_layers, its
  // decoder_sparse_step, DeepSeek-V2's first_k_dense_replace) need intermediate_size.
  EXPECT_EQ(dense_width("llama-tiny"), 172);
  EXPECT_EQ(dense_width("qwen3-moe-tiny"), 128);    // mlp_only_layers [1]
  EXPECT_EQ(dense_width("qwen3-moe-bf16"), 256);    // decoder_sparse_step 2: layers 0 and 2 dense
  EXPECT_EQ(dense_width("deepseek-v2-tiny"), 128);  // first_k_dense_replace 1
  // Every layer sparse: no dense MLP runs, so none is sized (Mixtral's 14,336 columns would
  // hold gigabytes of activations at large batched-token budgets).
  EXPECT_EQ(dense_width("mixtral-tiny"), 0);
  EXPECT_EQ(dense_width("mixtral-bf16"), 0);
  // The shared experts' MLP runs in every sparse layer: at least its width.
  EXPECT_EQ(dense_width("mixtral-tiny", 96), 96);
  EXPECT_EQ(dense_width("deepseek-v2-tiny", 512), 512);
}

}  // namespace
}  // namespace actorserve::testing
