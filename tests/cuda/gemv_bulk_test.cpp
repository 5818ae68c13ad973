// The bulk-copy one-token GEMVs (gpu/cuda/linear/gemv_bulk.hpp) against the register-streaming kernels of
// gemv_kernel.hpp on the same random operands: equal bit for bit under every grid (blocks per SM,
// ring stages), over shapes with partial slices, rows past the end and fewer groups than blocks;
// then the executor's one-token steps with and without them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cuda/linear/gemv_bulk.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

/// The bulk path off for every GEMV (the register kernels).
gpu::bulk_gemv_tuning register_kernels() {
  gpu::bulk_gemv_tuning t;
  t.plain = t.qkv = t.gate_up = false;
  return t;
}

/// Blocks per SM, ring stages, QKV rotary pairs per group, L2 evict-first copies: the default
/// grid first.
gpu::bulk_gemv_tuning grid(int blocks_per_sm, int stages, int qkv_pairs, bool evict_first) {
  gpu::bulk_gemv_tuning t;
  t.blocks_per_sm = blocks_per_sm;
  t.stages = stages;
  t.qkv_pairs = qkv_pairs;
  t.evict_first = evict_first;
  return t;
}
const gpu::bulk_gemv_tuning kGrids[] = {gpu::bulk_gemv_tuning{}, grid(1, 4, 2, false), grid(1, 2, 1, false),
                                        grid(2, 3, 2, true),     grid(1, 13, 1, false), grid(3, 2, 2, true),
                                        grid(3, 4, 1, false),    grid(8, 1, 2, false)};

std::string describe(const gpu::bulk_gemv_tuning& g) {
  return "grid (" + std::to_string(g.blocks_per_sm) + ", " + std::to_string(g.stages) + ", " +
         std::to_string(g.qkv_pairs) + (g.evict_first ? ", evict first)" : ")");
}

class CudaBulkGemv : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
  /// Runs `launch(tuning)` under every grid (the bulk path on), comparing `out` with `want`.
  template <class V, class F>
  void expect_every_grid_equal(dev_vec<V>& out, const std::vector<V>& want, F launch, const std::string& what) {
    for (const gpu::bulk_gemv_tuning& g : kGrids) {
      out.poison();
      ASSERT_EQ(launch(g), 0) << what;
      EXPECT_EQ(count_unequal(out.download(), want), 0) << what << " " << describe(g);
    }
  }
};

TEST_P(CudaBulkGemv, PlainEqualsTheRegisterGemv) {
  const act_dtype dt = GetParam();
  for (int k : {8, 24, 1000, 2056, 4104, 14336}) {
    for (int n : {1, 7, 130, 1030}) {
      dev_vec<uint16_t> x(random_act_bits(dt, size_t(k), uint32_t(k))),
          w(random_act_bits(dt, size_t(n) * k, uint32_t(n), 0.1f));
      dev_vec<float> y(static_cast<size_t>(n));
      y.poison();
      ASSERT_EQ(cuda::gemv(dt, x.get(), 1, k, w.get(), n, y.get(), 0.0f, nullptr, 4, register_kernels()), 0);
      const auto want = y.download();
      expect_every_grid_equal(
          y, want,
          [&](const gpu::bulk_gemv_tuning& g) {
            return cuda::gemv(dt, x.get(), 1, k, w.get(), n, y.get(), 0.0f, nullptr, 4, g);
          },
          "k " + std::to_string(k) + " n " + std::to_string(n));
    }
  }
}

TEST_P(CudaBulkGemv, GateUpSiluEqualsTheRegisterKernel) {
  const act_dtype dt = GetParam();
  for (int inter : {1, 7, 130, 1000}) {
    for (int k : {8, 264, 4096}) {
      for (int rows : {2, 4}) {
        dev_vec<uint16_t> x(random_act_bits(dt, size_t(k), 1)),
            w(random_act_bits(dt, size_t(2) * inter * k, 2, 0.1f)), act(static_cast<size_t>(inter));
        act.poison();
        ASSERT_EQ(
            cuda::gemv_gate_up_silu(dt, x.get(), k, w.get(), inter, act.get(), rows, nullptr, register_kernels()), 0);
        const auto want = act.download();
        expect_every_grid_equal(
            act, want,
            [&](const gpu::bulk_gemv_tuning& g) {
              return cuda::gemv_gate_up_silu(dt, x.get(), k, w.get(), inter, act.get(), rows, nullptr, g);
            },
            "inter " + std::to_string(inter) + " k " + std::to_string(k) + " rows " + std::to_string(rows));
      }
    }
  }
}

TEST_P(CudaBulkGemv, QkvRopeEqualsTheRegisterKernel) {
  const act_dtype dt = GetParam();
  for (const qkv_rope_shape& sh : kQkvRopeShapes) {
    const qkv_rope_case qc(sh);
    dev_vec<uint16_t> x(random_act_bits(dt, size_t(sh.k), 3)),
        w(random_act_bits(dt, size_t(qc.width) * sh.k, 4, 0.2f)), kc(qc.cache), vc(qc.cache);
    dev_vec<float> q(static_cast<size_t>(qc.width));
    const cuda::rope_kv_args a = qc.args(q.get(), kc.get(), vc.get());
    for (auto* d : {&kc, &vc}) d->poison();
    q.poison();
    ASSERT_EQ(cuda::gemv_qkv_rope(dt, x.get(), sh.k, w.get(), a, nullptr, register_kernels()), 0);
    const std::vector<float> q_want = q.download();
    const std::vector<uint16_t> k_want = kc.download(), v_want = vc.download();
    const std::string what = "D " + std::to_string(sh.D) + " k " + std::to_string(sh.k);
    const auto launch = [&](const gpu::bulk_gemv_tuning& g) {
      for (auto* d : {&kc, &vc}) d->poison();
      const int rc = cuda::gemv_qkv_rope(dt, x.get(), sh.k, w.get(), a, nullptr, g);
      EXPECT_EQ(count_unequal(kc.download(), k_want), 0) << what << " k cache";
      EXPECT_EQ(count_unequal(vc.download(), v_want), 0) << what << " v cache";
      return rc;
    };
    expect_every_grid_equal(q, q_want, launch, what);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBulkGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

class CudaBulkExecutor : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaBulkExecutor, OneTokenStepsEqualTheRegisterGemvs) {
  const std::string dir = model_dir(GetParam());
  const int steps = 16;
  gpu::cuda_executor_options register_options = test_options(false);
  register_options.tuning.bulk = register_kernels();
  auto plain = gpu::make_cuda_executor(dir, register_options);
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  auto [tp, lp] = one_sequence(*plain.value(), steps, {});
  plain.value().reset();
  for (bool eager : {false, true}) {
    auto ex = gpu::make_cuda_executor(dir, test_options(eager));
    ASSERT_TRUE(ex.ok()) << ex.err().message;
    auto [tb, lb] = one_sequence(*ex.value(), steps, tp);
    EXPECT_EQ(tb, tp) << (eager ? "eager" : "graphs");
    ASSERT_EQ(lb.size(), lp.size());
    int unequal = 0;
    for (size_t k = 0; k < lb.size(); ++k) unequal += count_unequal(lb[k], lp[k]);
    EXPECT_EQ(unequal, 0) << (eager ? "eager" : "graphs") << ": logits differing from the register GEMVs";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaBulkExecutor, ::testing::Values("llama-hd128-bf16", "qwen2-tiny"),
                         model_param_name);

}  // namespace
}  // namespace actorserve::testing
