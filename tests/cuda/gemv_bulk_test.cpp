// The bulk-copy one-token GEMVs (gpu/cuda/gemv_bulk.hpp) against the register-streaming kernels of
// gemv_kernel.hpp on the same random operands: equal bit for bit under every grid (blocks per SM,
// ring stages), over shapes with partial slices, rows past the end and fewer groups than blocks;
// then the executor's one-token steps with and without them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "gpu/cuda/gemv_bulk.hpp"
#include "gpu/cuda/gemv_kernel.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

/// Blocks per SM, ring stages, QKV rotary pairs per group, L2 evict-first copies.
struct bulk_grid {
  int blocks_per_sm, stages, qkv_pairs;
  bool evict_first;
};
const bulk_grid kGrids[] = {{cuda::bulk_default_blocks, cuda::bulk_default_stages, cuda::bulk_default_qkv_pairs,
                             cuda::bulk_default_evict_first},
                            {1, 4, 2, false}, {1, 2, 1, false}, {2, 3, 2, true}, {1, 13, 1, false},
                            {3, 2, 2, true},  {3, 4, 1, false}, {8, 1, 2, false}};

std::string describe(const bulk_grid& g) {
  return "grid (" + std::to_string(g.blocks_per_sm) + ", " + std::to_string(g.stages) + ", " +
         std::to_string(g.qkv_pairs) + (g.evict_first ? ", evict first)" : ")");
}

void use_grid(const bulk_grid& g) {
  cuda::set_bulk_gemv_grid(g.blocks_per_sm, g.stages);
  cuda::set_bulk_qkv_pairs(g.qkv_pairs);
  cuda::set_bulk_evict_first(g.evict_first);
}

class CudaBulkGemv : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    mask_ = cuda::bulk_gemv();
    cuda::set_bulk_gemv(0);
  }
  void TearDown() override {
    cuda::set_bulk_gemv(mask_);
    use_grid(kGrids[0]);
  }
  /// Runs `launch` under every grid with the bulk path for `bit` on, comparing `out` with `want`.
  template <class V, class F>
  void expect_every_grid_equal(int bit, dev_vec<V>& out, const std::vector<V>& want, F launch,
                               const std::string& what) {
    for (const bulk_grid& g : kGrids) {
      use_grid(g);
      cuda::set_bulk_gemv(bit);
      out.poison();
      ASSERT_EQ(launch(), 0) << what;
      cuda::set_bulk_gemv(0);
      EXPECT_EQ(count_unequal(out.download(), want), 0) << what << " " << describe(g);
    }
  }
  int mask_ = 0;
};

TEST_P(CudaBulkGemv, PlainEqualsTheRegisterGemv) {
  const act_dtype dt = GetParam();
  for (int k : {8, 24, 1000, 2056, 4104, 14336}) {
    for (int n : {1, 7, 130, 1030}) {
      dev_vec<uint16_t> x(random_act_bits(dt, size_t(k), uint32_t(k))),
          w(random_act_bits(dt, size_t(n) * k, uint32_t(n), 0.1f));
      dev_vec<float> y(static_cast<size_t>(n));
      y.poison();
      ASSERT_EQ(cuda::gemv(dt, x.get(), 1, k, w.get(), n, y.get(), 0.0f, nullptr), 0);
      const auto want = y.download();
      expect_every_grid_equal(cuda::bulk_plain, y, want,
                              [&] { return cuda::gemv(dt, x.get(), 1, k, w.get(), n, y.get(), 0.0f, nullptr); },
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
        ASSERT_EQ(cuda::gemv_gate_up_silu(dt, x.get(), k, w.get(), inter, act.get(), rows, nullptr), 0);
        const auto want = act.download();
        expect_every_grid_equal(
            cuda::bulk_gate_up, act, want,
            [&] { return cuda::gemv_gate_up_silu(dt, x.get(), k, w.get(), inter, act.get(), rows, nullptr); },
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
    ASSERT_EQ(cuda::gemv_qkv_rope(dt, x.get(), sh.k, w.get(), a, nullptr), 0);
    const std::vector<float> q_want = q.download();
    const std::vector<uint16_t> k_want = kc.download(), v_want = vc.download();
    const std::string what = "D " + std::to_string(sh.D) + " k " + std::to_string(sh.k);
    const auto launch = [&] {
      for (auto* d : {&kc, &vc}) d->poison();
      const int rc = cuda::gemv_qkv_rope(dt, x.get(), sh.k, w.get(), a, nullptr);
      EXPECT_EQ(count_unequal(kc.download(), k_want), 0) << what << " k cache";
      EXPECT_EQ(count_unequal(vc.download(), v_want), 0) << what << " v cache";
      return rc;
    };
    expect_every_grid_equal(cuda::bulk_qkv, q, q_want, launch, what);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBulkGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

class CudaBulkExecutor : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    mask_ = cuda::bulk_gemv();
  }
  void TearDown() override { cuda::set_bulk_gemv(mask_); }
  int mask_ = 0;
};

TEST_P(CudaBulkExecutor, OneTokenStepsEqualTheRegisterGemvs) {
  const std::string dir = model_dir(GetParam());
  const int steps = 16;
  cuda::set_bulk_gemv(0);
  auto plain = gpu::make_cuda_executor(dir, test_options(false));
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  auto [tp, lp] = one_sequence(*plain.value(), steps, {});
  plain.value().reset();
  cuda::set_bulk_gemv(cuda::bulk_all);
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
