// The CUDA executor's kernel choice per GPU (gpu/cuda/tuning.hpp, cuda_tuning_for): Hopper with
// sm_90a code keeps the wgmma/TMA/bulk-copy kernels and PDL; Ampere and Ada, code compiled from
// compute_80 PTX, newer GPUs and --kernels portable get the cp.async/mma.sync kernels.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "gpu/cuda/tuning.hpp"

namespace actorserve::testing {
namespace {

using gpu::cuda_tuning;
using gpu::gpu_target;

gpu_target target(int major, int minor, int code_arch, bool sm90a) {
  gpu_target t;
  t.sm_major = major;
  t.sm_minor = minor;
  t.code_arch = code_arch;
  t.code_sm90a = sm90a;
  return t;
}

void expect_portable(const cuda_tuning& t, bool pdl) {
  EXPECT_EQ(t.attention.prefill, gpu::prefill_kernel::mma_sync);
  EXPECT_EQ(t.attention.decode, gpu::decode_kernel::cp_async);
  EXPECT_FALSE(t.bulk.plain);
  EXPECT_FALSE(t.bulk.qkv);
  EXPECT_FALSE(t.bulk.gate_up);
  EXPECT_FALSE(t.bulk.fp8);
  EXPECT_FALSE(t.attention.latent_cluster_merge);
  EXPECT_EQ(t.programmatic_launch, pdl);
}

TEST(cuda_tuning, hopper_with_sm90a_code_keeps_the_defaults) {
  const cuda_tuning t = gpu::cuda_tuning_for({}, target(9, 0, 90, true), kernel_choice::automatic);
  EXPECT_EQ(t.attention.prefill, gpu::prefill_kernel::automatic);
  EXPECT_EQ(t.attention.decode, gpu::decode_kernel::tma);
  EXPECT_TRUE(t.bulk.plain && t.bulk.qkv && t.bulk.gate_up && t.bulk.fp8);
  EXPECT_TRUE(t.attention.latent_cluster_merge);
  EXPECT_TRUE(t.programmatic_launch);
}

TEST(cuda_tuning, hopper_keeps_a_requested_hopper_kernel) {
  cuda_tuning requested;
  requested.attention.prefill = gpu::prefill_kernel::wgmma_cp_async;
  requested.bulk.qkv = false;
  const cuda_tuning t = gpu::cuda_tuning_for(requested, target(9, 0, 90, true), kernel_choice::automatic);
  EXPECT_EQ(t.attention.prefill, gpu::prefill_kernel::wgmma_cp_async);
  EXPECT_FALSE(t.bulk.qkv);
  EXPECT_TRUE(t.bulk.plain);
}

TEST(cuda_tuning, portable_on_hopper_replaces_every_hopper_choice) {
  expect_portable(gpu::cuda_tuning_for({}, target(9, 0, 90, true), kernel_choice::portable), false);
}

TEST(cuda_tuning, ampere_and_ada_get_the_portable_kernels) {
  for (auto [major, minor] : {std::pair{8, 0}, std::pair{8, 6}, std::pair{8, 7}, std::pair{8, 9}})
    expect_portable(gpu::cuda_tuning_for({}, target(major, minor, 80, false), kernel_choice::automatic), false);
}

TEST(cuda_tuning, hopper_running_compute_80_code_gets_the_portable_kernels) {
  expect_portable(gpu::cuda_tuning_for({}, target(9, 0, 80, false), kernel_choice::automatic), false);
}

TEST(cuda_tuning, hopper_running_compute_90_code_keeps_tma_but_not_wgmma) {
  const cuda_tuning t = gpu::cuda_tuning_for({}, target(9, 0, 90, false), kernel_choice::automatic);
  EXPECT_EQ(t.attention.prefill, gpu::prefill_kernel::mma_sync);
  EXPECT_EQ(t.attention.decode, gpu::decode_kernel::tma);
  EXPECT_TRUE(t.bulk.plain);
  EXPECT_TRUE(t.attention.latent_cluster_merge);  // clusters need sm_90 code, not sm_90a
  EXPECT_TRUE(t.programmatic_launch);
}

TEST(cuda_tuning, newer_gpus_run_the_portable_kernels_with_pdl) {
  expect_portable(gpu::cuda_tuning_for({}, target(10, 0, 90, false), kernel_choice::automatic), true);
  expect_portable(gpu::cuda_tuning_for({}, target(12, 0, 90, false), kernel_choice::automatic), true);
  expect_portable(gpu::cuda_tuning_for({}, target(12, 0, 90, false), kernel_choice::portable), false);
}

TEST(cuda_tuning, the_other_choices_pass_through) {
  cuda_tuning requested;
  requested.fused_decode = false;
  requested.qkv_16bit = true;
  requested.attention.merge = gpu::split_merge::separate_kernel;
  requested.moe_cublas_min_rows_per_expert = 0;
  const cuda_tuning t = gpu::cuda_tuning_for(requested, target(8, 6, 80, false), kernel_choice::automatic);
  EXPECT_FALSE(t.fused_decode);
  EXPECT_TRUE(t.qkv_16bit);
  EXPECT_EQ(t.attention.merge, gpu::split_merge::separate_kernel);
  EXPECT_EQ(t.moe_cublas_min_rows_per_expert, 0);  // cuBLAS runs on every GPU
  EXPECT_EQ(cuda_tuning{}.moe_cublas_min_rows_per_expert, gpu::cuda::moe_cublas_rows_by_expert_size);
}

// The per-expert cuBLAS path of a mixture-of-experts chunk from the threshold's average rows per
// expert on (pairs / experts, what the host knows), for every chunk at 0; no overflow at the
// most pairs a chunk has (8,192 tokens x top-32) against the most experts and a large threshold.
TEST(cuda_tuning, moe_chunks_take_cublas_from_the_threshold_on) {
  const int min_rows = 576;
  for (int E : {1, 8, 64, 128, 1024}) {
    EXPECT_FALSE(gpu::cuda::reaches_moe_cublas_rows(min_rows * E - 1, E, min_rows)) << E << " experts";
    EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(min_rows * E, E, min_rows)) << E << " experts";
    EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(1, E, 0)) << E << " experts";
  }
  // Mixtral-8x7B (top-2 of 8): a chunk of 4,096 tokens is 1,024 rows an expert.
  EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(4096 * 2, 8, 1024));
  EXPECT_FALSE(gpu::cuda::reaches_moe_cublas_rows(4095 * 2, 8, 1024));
  EXPECT_FALSE(gpu::cuda::reaches_moe_cublas_rows(8192 * 32, 1024, 1 << 30));
  EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(8192 * 32, 1024, 256));
}

// The default threshold by the experts' size (rows x inter x hidden of at least
// moe_cublas_min_expert_macs, never below moe_cublas_min_rows_floor rows): Mixtral-8x7B's large
// experts from 256 rows (the default 2,048-token chunk, 512 rows an expert, takes cuBLAS, where it
// measured 0.48x the grouped GEMM), DeepSeek-V2-Lite's from 486 (measured: 1.04x at 384, 0.87x at
// 576), Qwen3-30B-A3B's small ones from 891 (1.15x at 512).
TEST(cuda_tuning, moe_cublas_threshold_follows_the_experts_size) {
  using gpu::cuda::moe_cublas_min_rows_for;
  EXPECT_EQ(moe_cublas_min_rows_for(14336, 4096), 256);
  EXPECT_EQ(moe_cublas_min_rows_for(1408, 2048), 486);
  EXPECT_EQ(moe_cublas_min_rows_for(768, 2048), 891);
  EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(2048 * 2, 8, moe_cublas_min_rows_for(14336, 4096)));
  EXPECT_FALSE(gpu::cuda::reaches_moe_cublas_rows(384 * 64, 64, moe_cublas_min_rows_for(1408, 2048)));
  EXPECT_TRUE(gpu::cuda::reaches_moe_cublas_rows(576 * 64, 64, moe_cublas_min_rows_for(1408, 2048)));
  EXPECT_FALSE(gpu::cuda::reaches_moe_cublas_rows(8192 * 8, 128, moe_cublas_min_rows_for(768, 2048)));
  // Tiny experts need more rows than any chunk has (capped); huge ones take the floor.
  EXPECT_EQ(moe_cublas_min_rows_for(1, 1), 1 << 30);
  EXPECT_EQ(moe_cublas_min_rows_for(1 << 20, 1 << 20), gpu::cuda::moe_cublas_min_rows_floor);
  EXPECT_EQ(moe_cublas_min_rows_for(0, 0), 1 << 30);
}

TEST(cuda_tuning, the_log_line_names_the_choices) {
  const std::string hopper = gpu::describe_kernels(gpu::cuda_tuning_for({}, target(9, 0, 90, true), kernel_choice::automatic));
  EXPECT_NE(hopper.find("wgmma"), std::string::npos) << hopper;
  EXPECT_NE(hopper.find("TMA"), std::string::npos) << hopper;
  EXPECT_NE(hopper.find("latent merge in clusters"), std::string::npos) << hopper;
  const std::string ampere = gpu::describe_kernels(gpu::cuda_tuning_for({}, target(8, 0, 80, false), kernel_choice::automatic));
  EXPECT_NE(ampere.find("mma.sync"), std::string::npos) << ampere;
  EXPECT_NE(ampere.find("cp.async"), std::string::npos) << ampere;
  EXPECT_NE(ampere.find("plain launches"), std::string::npos) << ampere;
  EXPECT_NE(ampere.find("latent merge by the last piece"), std::string::npos) << ampere;
}

TEST(cuda_tuning, the_oldest_gpu_is_ampere) { EXPECT_EQ(gpu::kMinSmMajor, 8); }

}  // namespace
}  // namespace actorserve::testing
