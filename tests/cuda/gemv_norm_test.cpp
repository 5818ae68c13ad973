// The one-token GEMVs with the residual add + RMSNorm folded in (gpu/cuda/gemv_norm.hpp) against
// the launches they replace (add_rmsnorm, then the GEMVs of gemv_kernel.hpp) on the same random
// operands: the outputs must be equal bit for bit, whatever the grid; then the executor's
// one-token steps with and without the folded norms.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cuda/gemv_kernel.hpp"
#include "gpu/cuda/gemv_norm.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

std::vector<float> random_f32(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = ud(rng);
  return v;
}

/// The grids the normed kernels take: blocks per SM (-1: a block per group, 0: one wave) and
/// 128-thread sub-blocks per block.
struct grid_mode {
  int blocks_per_sm, sub_blocks;
};
const grid_mode kGridModes[] = {{-1, 1}, {0, 1}, {1, 1}, {3, 3}, {0, 2}, {1, 6}, {-1, 4}, {0, 6}};

void use_grid(const grid_mode& m) {
  cuda::set_norm_gemv_blocks_per_sm(m.blocks_per_sm);
  cuda::set_norm_gemv_sub_blocks(m.sub_blocks);
}

std::string describe(const grid_mode& m) {
  return "grid (" + std::to_string(m.blocks_per_sm) + ", " + std::to_string(m.sub_blocks) + ")";
}

/// A residual row with its norm weight, and x = add_rmsnorm of it (the unfused path's input).
struct normed_row {
  dev_vec<float> residual, weight;
  dev_vec<uint16_t> x;
  cuda::norm_input in;
  normed_row(act_dtype dt, int hidden, uint32_t seed)
      : residual(random_f32(size_t(hidden), seed, -2.0f, 2.0f)),
        weight(random_f32(size_t(hidden), seed + 1, 0.5f, 1.5f)),
        x(size_t(hidden)) {
    in.residual = residual.get();
    in.weight = weight.get();
    in.eps = 1e-5f;
    in.hidden = hidden;
    dev_vec<float> copy(residual.download());  // add_rmsnorm without a delta leaves it as it is
    EXPECT_EQ(cuda::add_rmsnorm(dt, copy.get(), nullptr, nullptr, weight.get(), in.eps, nullptr, 1, hidden, x.get(),
                                nullptr),
              0);
  }
};

class CudaNormGemv : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
  void TearDown() override { use_grid({0, 3}); }
};

TEST_P(CudaNormGemv, PlainEqualsAddRmsnormThenGemv) {
  const act_dtype dt = GetParam();
  for (int hidden : {8, 64, 200, 512, 1000, 4096, 12288}) {
    for (int n : {1, 5, 37}) {
      normed_row row(dt, hidden, uint32_t(hidden + n));
      dev_vec<uint16_t> w(random_act_bits(dt, size_t(n) * hidden, 9, 0.1f));
      ASSERT_TRUE(cuda::norm_gemv_supported(row.in, w.get()));
      dev_vec<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ASSERT_EQ(cuda::gemv(dt, row.x.get(), 1, hidden, w.get(), n, want.get(), 0.0f, nullptr), 0);
      const auto residual_before = row.residual.download();
      for (const grid_mode& mode : kGridModes) {
        use_grid(mode);
        got.poison();
        ASSERT_EQ(cuda::gemv_norm(dt, row.in, w.get(), n, got.get(), nullptr), 0);
        EXPECT_EQ(count_unequal(got.download(), want.download()), 0)
            << "hidden " << hidden << " n " << n << " " << describe(mode);
      }
      EXPECT_EQ(count_unequal(row.residual.download(), residual_before), 0) << "the residual is read only";
    }
  }
}

TEST_P(CudaNormGemv, GateUpSiluEqualsAddRmsnormThenFusedGemv) {
  const act_dtype dt = GetParam();
  for (int inter : {1, 7, 130, 1000}) {
    for (int hidden : {8, 264, 4096}) {
      normed_row row(dt, hidden, uint32_t(inter * 7 + hidden));
      dev_vec<uint16_t> w(random_act_bits(dt, size_t(2) * inter * hidden, 2, 0.1f));
      for (int rows : {2, 4, 0}) {  // 0: the normed kernel's default (4)
        dev_vec<uint16_t> want(static_cast<size_t>(inter)), got(static_cast<size_t>(inter));
        ASSERT_EQ(cuda::gemv_gate_up_silu(dt, row.x.get(), hidden, w.get(), inter, want.get(), rows ? rows : 4,
                                          nullptr),
                  0);
        for (const grid_mode& mode : kGridModes) {
          use_grid(mode);
          got.poison();
          ASSERT_EQ(cuda::gemv_norm_gate_up_silu(dt, row.in, w.get(), inter, got.get(), rows, nullptr), 0);
          EXPECT_EQ(count_unequal(got.download(), want.download()), 0)
              << "inter " << inter << " hidden " << hidden << " rows " << rows << " " << describe(mode);
        }
      }
    }
  }
}

TEST_P(CudaNormGemv, QkvRopeEqualsAddRmsnormThenFusedGemv) {
  const act_dtype dt = GetParam();
  for (const qkv_rope_shape& sh : kQkvRopeShapes) {
    const qkv_rope_case qc(sh);
    const int width = qc.width;
    const size_t cache = qc.cache;
    normed_row row(dt, sh.k, uint32_t(sh.k));
    dev_vec<uint16_t> w(random_act_bits(dt, size_t(width) * sh.k, 4, 0.2f));
    dev_vec<float> q_want(static_cast<size_t>(width)), q_got(static_cast<size_t>(width));
    dev_vec<uint16_t> k_want(cache), v_want(cache), k_got(cache), v_got(cache);
    cuda::rope_kv_args a = qc.args(q_want.get(), k_want.get(), v_want.get());
    k_want.poison();
    v_want.poison();
    ASSERT_EQ(cuda::gemv_qkv_rope(dt, row.x.get(), sh.k, w.get(), a, nullptr), 0);
    a.qkv = q_got.get();
    a.k_cache = k_got.get();
    a.v_cache = v_got.get();
    for (const grid_mode& mode : kGridModes) {
      use_grid(mode);
      for (auto* d : {&k_got, &v_got}) d->poison();
      q_got.poison();
      ASSERT_EQ(cuda::gemv_norm_qkv_rope(dt, row.in, w.get(), a, nullptr), 0);
      EXPECT_EQ(count_unequal(q_got.download(), q_want.download()), 0) << "D " << sh.D << " " << describe(mode);
      EXPECT_EQ(count_unequal(k_got.download(), k_want.download()), 0) << "D " << sh.D << " " << describe(mode);
      EXPECT_EQ(count_unequal(v_got.download(), v_want.download()), 0) << "D " << sh.D << " " << describe(mode);
    }
  }
}

TEST_P(CudaNormGemv, AddResidualEqualsGemvThenAddRmsnorm) {
  const act_dtype dt = GetParam();
  for (int n : {1, 7, 4096}) {
    for (int k : {8, 264, 4096}) {
      for (bool with_bias : {false, true}) {
        auto res0 = random_f32(size_t(n), uint32_t(n + k), -2.0f, 2.0f);
        const auto x = random_act_bits(dt, size_t(k), 3, 1.0f), wh = random_act_bits(dt, size_t(n) * k, 4, 0.1f);
        dev_vec<uint16_t> d_x(x), w(wh);
        dev_vec<float> bias(random_f32(size_t(n), 6, -0.5f, 0.5f)), norm_w(std::vector<float>(size_t(n), 1.0f));
        dev_vec<float> want(res0), got(res0), delta(static_cast<size_t>(n));
        dev_vec<uint16_t> scratch(static_cast<size_t>(n));
        const float* b = with_bias ? bias.get() : nullptr;
        ASSERT_EQ(cuda::gemv(dt, d_x.get(), 1, k, w.get(), n, delta.get(), 0.0f, nullptr), 0);
        ASSERT_EQ(cuda::add_rmsnorm(dt, want.get(), delta.get(), b, norm_w.get(), 1e-5f, nullptr, 1, n,
                                    scratch.get(), nullptr),
                  0);
        ASSERT_EQ(cuda::gemv_add_residual(dt, d_x.get(), k, w.get(), n, got.get(), b, nullptr), 0);
        const auto g = got.download(), wv = want.download();
        EXPECT_EQ(count_unequal(g, wv), 0) << "n " << n << " k " << k << " bias " << with_bias;
        // And the sum itself, against fp64 (catches a wrong row or a dropped bias in both paths).
        const auto bh = bias.download();
        double worst = 0;
        for (int r = 0; r < n; ++r) {
          double d = with_bias ? bh[size_t(r)] : 0.0;
          for (int q = 0; q < k; ++q)
            d += double(from_act_bits(dt, x[size_t(q)])) * from_act_bits(dt, wh[size_t(r) * k + q]);
          worst = std::max(worst, std::abs(g[size_t(r)] - (res0[size_t(r)] + d)));
        }
        EXPECT_LT(worst, 1e-4) << "n " << n << " k " << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaNormGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

class CudaNormFoldedExecutor : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    fold_was_on_ = cuda::fused_norm_decode();
    add_was_on_ = cuda::residual_gemv_decode();
  }
  void TearDown() override {
    cuda::set_fused_norm_decode(fold_was_on_);
    cuda::set_residual_gemv_decode(add_was_on_);
  }
  bool fold_was_on_ = false, add_was_on_ = false;
};

TEST_P(CudaNormFoldedExecutor, OneTokenStepsEqualTheFusedPathWithNormKernels) {
  const std::string dir = model_dir(GetParam());
  const int steps = 16;
  cuda::set_fused_norm_decode(false);
  cuda::set_residual_gemv_decode(false);
  auto plain = gpu::make_cuda_executor(dir, test_options(false));
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  auto [tp, lp] = one_sequence(*plain.value(), steps, {});
  plain.value().reset();
  for (const bool fold : {true, false}) {  // the norms folded; or only o/down adding into the residual
    cuda::set_fused_norm_decode(fold);
    cuda::set_residual_gemv_decode(!fold);
    for (bool eager : {false, true}) {
      const std::string what = std::string(fold ? "folded norms" : "residual GEMVs") + (eager ? ", eager" : ", graphs");
      auto ex = gpu::make_cuda_executor(dir, test_options(eager));
      ASSERT_TRUE(ex.ok()) << ex.err().message;
      auto [tf, lf] = one_sequence(*ex.value(), steps, tp);
      EXPECT_EQ(tf, tp) << what;
      ASSERT_EQ(lf.size(), lp.size());
      int unequal = 0;
      for (size_t k = 0; k < lf.size(); ++k) unequal += count_unequal(lf[k], lp[k]);
      EXPECT_EQ(unequal, 0) << what << ": logits differing from the path with norm kernels";
      if (!eager) {
        EXPECT_GE(dynamic_cast<gpu::cuda_executor_probe*>(ex.value().get())->graph_replays(), steps) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaNormFoldedExecutor,
                         ::testing::Values("llama-hd128-bf16", "qwen2-tiny", "mistral-tiny"), model_param_name);

}  // namespace
}  // namespace actorserve::testing
