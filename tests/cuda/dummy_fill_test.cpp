// --load-format dummy on the GPU: the device fill writes exactly the host's values (bf16 bits,
// fp32 norms), and the CUDA and CPU executors on the same generated weights give the same logits
// within the dense bound of executor_cpu_agreement_test, with --quantization fp8 too.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cpu/cpu_executor.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "scratch_dir.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

namespace fs = std::filesystem;

TEST(DummyFill, DeviceValuesEqualTheHostsElementForElement) {
  AS_REQUIRE_CUDA();
  constexpr size_t n = (size_t{1} << 20) + 37;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(float)), cudaSuccess);
  std::vector<uint16_t> bits(n);
  std::vector<float> got(n), want(n);
  for (const gpu::dummy_fill f : {gpu::dummy_fill{0, gpu::dummy_tensor_id("model.embed_tokens.weight"), 0, false},
                                  gpu::dummy_fill{123, gpu::dummy_tensor_id("lm_head.weight"), 4096 * 7, false},
                                  gpu::dummy_fill{5, gpu::dummy_tensor_id("model.norm.weight"), 0, true}}) {
    gpu::fill_dummy_f32(f, n, want.data());
    ASSERT_EQ(gpu::cuda::fill_dummy_act(f, gpu::cuda::act_dtype::bf16, d, n, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bits.data(), d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(bits[i], gpu::dummy_bf16_bits(f.seed, f.tensor_id, f.first + i, f.ones)) << "element " << i;
    ASSERT_EQ(gpu::cuda::fill_dummy_f32_device(f, static_cast<float*>(d), n, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
  }
  cudaFree(d);
}

scratch_dir config_only_copy(const std::string& fixture) {
  scratch_dir dir("cuda_dummy_" + fixture);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json"})
    if (fs::exists(fs::path(model_dir(fixture)) / f)) fs::copy_file(fs::path(model_dir(fixture)) / f, dir / f);
  return dir;
}

class DummyCudaVsCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

/// The generated weights of `fixture` through both executors (`quantize_fp8`: --quantization fp8
/// on both, the CUDA executor rounding the device-generated weights at load), one prefill.
void expect_dummy_prefill_agrees(const std::string& fixture, bool quantize_fp8) {
  const scratch_dir copy = config_only_copy(fixture);
  const std::string dir = copy.path().string();
  const gpu::weight_source dummy{true, 11};
  gpu::cpu_executor_options co;
  co.num_blocks = 64;
  co.weights = dummy;
  co.quantize_weights_fp8 = quantize_fp8;
  auto cpu = gpu::cpu_executor::create(dir, co);
  ASSERT_TRUE(cpu.ok()) << cpu.err().message;
  gpu::cuda_executor_options o = test_options();
  o.weights = dummy;
  o.quantize_fp8 = quantize_fp8;
  // The FP8 GEMMs' per-token activation rounding has its own bound (executor_cpu_agreement_test);
  // with it off, the device computes with the CPU's E4M3 weights and bf16 activations.
  o.tuning.fp8_activations = false;
  auto made = gpu::make_cuda_executor(dir, o);
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(made.value().get());
  ASSERT_NE(probe, nullptr);
  std::vector<int32_t> prompt(29);
  std::iota(prompt.begin(), prompt.end(), 11);
  gpu::step_batch b;
  b.seqs.push_back(greedy(1, 0, prompt, {3, 9, 4}));
  std::vector<std::vector<float>> cpu_logits;
  auto rc = cpu.value()->run_step_sync(b, &cpu_logits);
  ASSERT_TRUE(rc.outcome.ok()) << rc.outcome.err().message;
  auto rg = run_step(*made.value(), b);
  ASSERT_TRUE(rg.outcome.ok()) << rg.outcome.err().message;
  const std::vector<float>& want = cpu_logits.at(0);
  const std::vector<float> got = probe->last_logits().at(0);  // last_logits() returns a copy
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    scale = std::max(scale, std::abs(double(want[i])));
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, logits_bound * scale) << "largest |logit| " << scale;
}

TEST_P(DummyCudaVsCpu, PrefillLogitsAgree) { expect_dummy_prefill_agrees(GetParam(), false); }

class DummyCudaVsCpuQuantizedFp8 : public DummyCudaVsCpu {};

TEST_P(DummyCudaVsCpuQuantizedFp8, PrefillLogitsAgree) { expect_dummy_prefill_agrees(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Models, DummyCudaVsCpu, ::testing::Values("llama-tiny", "qwen3-tiny", "mixtral-tiny",
                                                                   "qwen3-moe-tiny"),
                         model_param_name);

// --quantization fp8 on generated weights: the experts' rows rounded through E4M3 on the device
// as the CPU rounds them.
INSTANTIATE_TEST_SUITE_P(Models, DummyCudaVsCpuQuantizedFp8,
                         ::testing::Values("llama-tiny", "qwen3-tiny", "mixtral-tiny", "qwen3-moe-tiny"),
                         model_param_name);

}  // namespace
}  // namespace actorserve::testing
