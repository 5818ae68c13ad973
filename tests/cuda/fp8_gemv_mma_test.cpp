// The FP8 GEMVs on the tensor cores (gpu/cuda/linear/fp8_gemv_mma.hpp) on random operands: every
// output within fp32 accumulation error of the fp64 reference for 1 to 8 activation rows, k with
// partial and single-chunk slices, n not a multiple of the 16-row group and with more groups than
// blocks, bf16 and fp16, beta 0 and 1; the same bits under every ring grid; activation rows far
// outside fp16's range (the power-of-two scaling), zero rows among them; the fused QKV + rope and
// gate/up + SiLU forms equal to fp8_gemv_mma followed by the element-wise kernels bit for bit;
// refusals; gemm_runner's routing; and the executor's FP8 one-token steps with them against
// the CUDA-core GEMVs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "fp8_operands.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv_fused.hpp"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

bool runs_ring() { return gpu::runs_tma(cuda::loaded_gpu_target()); }

class CudaFp8MmaGemv : public ::testing::Test {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    if (!runs_ring()) GTEST_SKIP() << "the bulk-copy engine needs compute capability 9.x";
  }
};

std::string describe(const fp8_case& c) {
  return std::string(c.dt == act_dtype::bf16 ? "bf16" : "fp16") + " m=" + std::to_string(c.m) +
         " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) + " beta=" + std::to_string(c.beta);
}

/// Every output within `rel` of sum |x w| (+ |beta y0|) of the fp64 reference, with no absolute
/// slack: a row of zeros with beta 0 must give exact zeros, a row scaled by 2^-60 its own tiny sums.
void expect_relative(const fp8_case& c, const fp8_operands& o, const std::vector<float>& got, double rel,
                     const std::string& what) {
  ASSERT_EQ(got.size(), size_t(c.m) * c.n);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = 0, a = 0;
      for (int q = 0; q < c.k; ++q) {
        const double p = double(from_act_bits(c.dt, o.x[size_t(i) * c.k + q])) * weight(c, o, j, q, false);
        s += p;
        a += std::abs(p);
      }
      const size_t idx = size_t(i) * c.n + j;
      const double ref = s + double(c.beta) * o.y0[idx];
      const double bound = rel * (a + std::abs(double(c.beta) * o.y0[idx]));
      ASSERT_TRUE(std::isfinite(got[idx])) << what << " at row " << i << ", output " << j;
      ASSERT_LE(std::abs(double(got[idx]) - ref), bound) << what << " at row " << i << ", output " << j;
    }
}

TEST_F(CudaFp8MmaGemv, MatchesFp64ReferenceAndEveryGridAgrees) {
  uint32_t seed = 1300;
  for (auto dt : {act_dtype::bf16, act_dtype::fp16})
    // 16: one chunk; 1040: a partial slice; 4112: a second slice of one chunk; 8208: three slices.
    for (int k : {16, 1040, 4112, 8208})
      for (int n : {7, 130, 1030})
        for (int m : {1, 3, 8})
          for (float beta : {0.0f, 1.0f}) {
            const fp8_case c{dt, m, k, n, beta};
            const fp8_operands o = make_fp8_operands(c, 0, seed++);
            dev_vec<uint16_t> dx(o.x);
            dev_vec<uint8_t> dq(o.q);
            dev_vec<float> ds(o.scale), dy;
            ASSERT_TRUE(cuda::fp8_gemv_mma_supported(dx.get(), m, k, dq.get()));
            std::vector<float> first;
            for (const gpu::bulk_gemv_tuning& g : kGrids) {
              if (beta == 0.0f) {
                dy.resize(size_t(m) * n);
                dy.poison();  // beta 0 neither reads y nor leaves an output unwritten
              } else {
                dy.upload(o.y0);
              }
              ASSERT_EQ(cuda::fp8_gemv_mma(dt, dx.get(), m, k, dq.get(), ds.get(), n, dy.get(), beta, nullptr, g), 0)
                  << describe(c);
              std::vector<float> got = dy.download();
              if (first.empty()) {
                expect_relative(c, o, got, 3e-5, describe(c));
                first = std::move(got);
              } else {
                EXPECT_EQ(count_unequal(got, first), 0)
                    << describe(c) << " grid (" << g.blocks_per_sm << ", " << g.stages << ")";
              }
            }
          }
}

// Each activation row takes its own power-of-two scale: rows far above fp16's largest value and
// far below its smallest normal one keep their relative precision, and a zero row stays zero.
TEST_F(CudaFp8MmaGemv, ScalesEachActivationRowIntoFp16Range) {
  const int k = 4112, n = 130;
  uint32_t seed = 1500;
  for (auto dt : {act_dtype::bf16, act_dtype::fp16}) {
    // Powers of two each row is multiplied by (0: the row is zero); fp16 inputs stay in fp16.
    const std::vector<int> bf16_exp = {40, -60, 1000, 0, 14, -24, 100, -120};
    const std::vector<int> fp16_exp = {10, -10, 1000, 0, 14, -14, 15, -8};
    const std::vector<int>& exps = dt == act_dtype::bf16 ? bf16_exp : fp16_exp;
    const fp8_case c{dt, int(exps.size()), k, n, 0.0f};
    fp8_operands o = make_fp8_operands(c, 0, seed++);
    for (int i = 0; i < c.m; ++i)
      for (int q = 0; q < k; ++q) {
        uint16_t& b = o.x[size_t(i) * k + q];
        b = to_act_bits(dt, exps[i] == 1000 ? 0.0f : std::ldexp(from_act_bits(dt, b), exps[i]));
      }
    dev_vec<uint16_t> dx(o.x);
    dev_vec<uint8_t> dq(o.q);
    dev_vec<float> ds(o.scale), dy(size_t(c.m) * n);
    dy.poison();
    ASSERT_EQ(cuda::fp8_gemv_mma(dt, dx.get(), c.m, k, dq.get(), ds.get(), n, dy.get(), 0.0f, nullptr), 0);
    expect_relative(c, o, dy.download(), 3e-5, describe(c) + " with scaled rows");
  }
}

TEST_F(CudaFp8MmaGemv, FusedFormsEqualTheGemvThenTheElementwiseKernels) {
  gpu::bulk_gemv_tuning mma;
  mma.fp8_mma_min_rows = 1;  // the one-token GEMVs too
  uint32_t seed = 1600;
  for (auto dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const qkv_rope_shape& sh : kQkvRopeShapes) {
      if (sh.k % 16 != 0) continue;
      const qkv_rope_case qc(sh);
      const fp8_operands o = make_fp8_operands(fp8_case{dt, 1, sh.k, qc.width, 0.0f}, 0, seed++);
      dev_vec<uint16_t> dx(o.x);
      dev_vec<uint8_t> dq(o.q);
      dev_vec<float> dscale(o.scale), qkv_u(static_cast<size_t>(qc.width)), qkv_f(static_cast<size_t>(qc.width));
      for (bool kv_fp8 : {false, true}) {
        const size_t cache_bytes = qc.cache * (kv_fp8 ? 1 : 2);
        dev_vec<uint8_t> ku(cache_bytes), vu(cache_bytes), kf(cache_bytes), vf(cache_bytes);
        for (auto* d : {&ku, &vu, &kf, &vf}) d->poison();
        cuda::rope_kv_args au = qc.args(qkv_u.get(), ku.get(), vu.get()), af = qc.args(qkv_f.get(), kf.get(), vf.get());
        au.kv_fp8 = af.kv_fp8 = kv_fp8;
        au.k_scale = af.k_scale = 0.037f;
        au.v_scale = af.v_scale = 0.0213f;
        ASSERT_EQ(cuda::fp8_gemv_mma(dt, dx.get(), 1, sh.k, dq.get(), dscale.get(), qc.width, qkv_u.get(), 0.0f,
                                     nullptr),
                  0);
        ASSERT_EQ(cuda::rope_kv_write(dt, au, nullptr), 0);
        qkv_f.poison();
        // Through the launcher the executor uses, which routes to the tensor-core form.
        ASSERT_EQ(cuda::fp8_gemv_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), af, nullptr, mma), 0);
        const std::string what = std::string(dt == act_dtype::bf16 ? "bf16" : "fp16") + " H=" + std::to_string(sh.H) +
                                 " D=" + std::to_string(sh.D) + " k=" + std::to_string(sh.k) +
                                 (kv_fp8 ? " fp8 cache" : " 16-bit cache");
        EXPECT_EQ(count_unequal(qkv_f.download(), qkv_u.download()), 0) << what << ": qkv";
        EXPECT_EQ(count_unequal(kf.download(), ku.download()), 0) << what << ": k cache";
        EXPECT_EQ(count_unequal(vf.download(), vu.download()), 0) << what << ": v cache";
      }
    }
    for (int inter : {1, 7, 130, 1000})
      for (int k : {16, 272, 4096}) {
        const fp8_operands o = make_fp8_operands(fp8_case{dt, 1, k, 2 * inter, 0.0f}, 0, seed++);
        dev_vec<uint16_t> dx(o.x), act_u(static_cast<size_t>(inter)), act_f(static_cast<size_t>(inter));
        dev_vec<uint8_t> dq(o.q);
        dev_vec<float> dscale(o.scale), gate_up(static_cast<size_t>(2 * inter));
        ASSERT_EQ(cuda::fp8_gemv_mma(dt, dx.get(), 1, k, dq.get(), dscale.get(), 2 * inter, gate_up.get(), 0.0f,
                                     nullptr),
                  0);
        ASSERT_EQ(cuda::silu_and_mul(dt, gate_up.get(), 1, inter, act_u.get(), nullptr), 0);
        act_f.poison();
        ASSERT_EQ(cuda::fp8_gemv_gate_up_silu(dt, dx.get(), k, dq.get(), dscale.get(), inter, act_f.get(), 2, nullptr,
                                              mma),
                  0);
        EXPECT_EQ(count_unequal(act_f.download(), act_u.download()), 0)
            << (dt == act_dtype::bf16 ? "bf16" : "fp16") << " inter=" << inter << " k=" << k;
      }
  }
}

TEST_F(CudaFp8MmaGemv, RefusesWhatItCannotTake) {
  dev_vec<uint16_t> buf(8192);
  dev_vec<float> scale(64), y(64 * 9);
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.get());
  EXPECT_TRUE(cuda::fp8_gemv_mma_supported(buf.get(), 8, 64, bytes));
  EXPECT_FALSE(cuda::fp8_gemv_mma_supported(buf.get(), 0, 64, bytes));      // no rows
  EXPECT_FALSE(cuda::fp8_gemv_mma_supported(buf.get(), 9, 64, bytes));      // more rows than the MMA's N
  EXPECT_FALSE(cuda::fp8_gemv_mma_supported(buf.get(), 1, 24, bytes));      // k % 16
  EXPECT_FALSE(cuda::fp8_gemv_mma_supported(buf.get() + 1, 1, 64, bytes));  // x misaligned
  EXPECT_FALSE(cuda::fp8_gemv_mma_supported(buf.get(), 1, 64, bytes + 8));  // weight rows misaligned
  y.poison();
  const std::vector<float> before = y.download();
  EXPECT_EQ(cuda::fp8_gemv_mma(act_dtype::bf16, buf.get(), 9, 64, bytes, scale.get(), 64, y.get(), 0.0f, nullptr),
            int(cudaErrorInvalidValue));
  EXPECT_EQ(cuda::fp8_gemv_mma(act_dtype::fp16, buf.get(), 1, 24, bytes, scale.get(), 64, y.get(), 0.0f, nullptr),
            int(cudaErrorInvalidValue));
  EXPECT_EQ(cuda::fp8_gemv_mma_gate_up_silu(act_dtype::bf16, buf.get() + 1, 64, bytes, scale.get(), 32, y.get(),
                                            nullptr),
            int(cudaErrorInvalidValue));
  EXPECT_EQ(count_unequal(y.download(), before), 0) << "a refused launch wrote y";
}

// gemm_runner takes the tensor-core GEMV for fp8_mma_min_rows to 8 aligned rows with per-row
// scales (1, the default 3, and 0: never); never for block scales, 9 rows or a misaligned x.
TEST_F(CudaFp8MmaGemv, GemmRunnerRoutesUpToEightRows) {
  const int k = 1040, n = 300;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  {
    cuda::gemm_runner g;
    ASSERT_TRUE(g.init(s, 1 << 22).ok());
    ASSERT_TRUE(g.reserve_fp8_scratch(act_dtype::bf16, size_t(n) * k).ok());
    ASSERT_TRUE(g.reserve_fp8_activations(16, k).ok());
    uint32_t seed = 1700;
    for (bool block : {false, true})
      for (int m : {1, 2, 5, 8, 9})
        for (int x_offset : {0, 1})
          for (int from : {1, 3, 0}) {
            const fp8_case c{act_dtype::bf16, m, k, n, 1.0f, block};
            const fp8_operands o = make_fp8_operands(c, x_offset, seed++);
            dev_vec<uint16_t> dx(o.x);
            dev_vec<uint8_t> dq(o.q);
            dev_vec<float> ds(o.scale), dy(o.y0);
            cuda::device_weight w;
            w.data = dq.get();
            (block ? w.block_scale : w.row_scale) = ds.get();
            gpu::bulk_gemv_tuning t;
            t.fp8_mma_min_rows = from;
            g.set_bulk_gemv(t);
            const int64_t before = g.fp8_gemv_mma_runs();
            ASSERT_TRUE(g.run(act_dtype::bf16, dx.get() + x_offset, m, k, w, n, dy.get(), c.beta).ok());
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
            const bool want = from > 0 && m >= from && !block && m <= 8 && x_offset == 0;
            EXPECT_EQ(g.fp8_gemv_mma_runs() - before, want ? 1 : 0)
                << "m=" << m << (block ? " block128" : " per_row") << " x offset " << x_offset
                << " from " << from << " rows";
            if (want) expect_matches(c, o, x_offset, false, dy.download(), 3e-5, "gemm_runner, mma");
          }
  }
  cudaStreamDestroy(s);
}

/// The executor's one-token steps under --quantization fp8 and --kv-cache-dtype fp8 with the
/// tensor-core GEMVs: the greedy tokens of the CUDA-core GEMVs, the logits within a small bound
/// (the sums' order differs, so a 16-bit activation may round the other way).
TEST(CudaFp8MmaExecutor, StepsMatchTheCudaCoreGemvs) {
  AS_REQUIRE_CUDA();
  if (!runs_ring()) GTEST_SKIP() << "the bulk-copy engine needs compute capability 9.x";
  const std::string dir = model_dir("llama-hd128-bf16");
  const int steps = 16;
  const auto options = [](bool eager, bool mma) {
    gpu::cuda_executor_options o = test_options(eager);
    o.quantize_fp8 = true;
    o.kv_cache_fp8 = true;
    o.kv_layout = kv_cache_layout::flash_decoding;
    o.block_size = 64;
    o.tuning.bulk.fp8_mma_min_rows = mma ? 1 : 0;  // 1: the one-token steps too
    return o;
  };
  auto base = gpu::make_cuda_executor(dir, options(false, false));
  ASSERT_TRUE(base.ok()) << base.err().message;
  auto [tb, lb] = one_sequence(*base.value(), steps, {});
  base.value().reset();
  for (bool eager : {false, true}) {
    auto ex = gpu::make_cuda_executor(dir, options(eager, true));
    ASSERT_TRUE(ex.ok()) << ex.err().message;
    auto [tm, lm] = one_sequence(*ex.value(), steps, tb);
    EXPECT_EQ(tm, tb) << (eager ? "eager" : "graphs");
    ASSERT_EQ(lm.size(), lb.size());
    float worst = 0;
    for (size_t s = 0; s < lm.size(); ++s)
      for (size_t v = 0; v < lm[s].size(); ++v) worst = std::max(worst, std::abs(lm[s][v] - lb[s][v]));
    EXPECT_LT(worst, 0.05f) << (eager ? "eager" : "graphs") << ": the largest logit difference";
    std::printf("[ info ] %s: largest logit difference %.3g\n", eager ? "eager" : "graphs", worst);
  }
}

}  // namespace
}  // namespace actorserve::testing
