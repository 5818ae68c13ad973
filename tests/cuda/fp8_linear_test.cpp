// FP8 E4M3 weights with per-row scales (gpu/cuda/linear/fp8_linear.hpp) against an fp64 CPU
// reference over the weights as gpu/model/fp8.hpp decodes them: the GEMV over awkward shapes (k
// not a multiple of the 4096-weight stride of a block's round, n not a multiple of the rows per
// block, m between the row templates, beta accumulation), the dequantization bit for bit, and
// gemm_runner's two FP8 paths (the GEMV, and dequantization + cuBLAS for larger m, k % 16 != 0 or
// misaligned x); and the same for 128 x 128 block scales (ragged last blocks) at every row count.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.hpp"
#include "fp8_operands.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {
namespace {

class CudaFp8Linear : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaFp8Linear, GemvMatchesFp64ReferenceOverAwkwardShapes) {
  uint32_t seed = 1;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 2, 3, 5, 8})
      for (int k : {16, 48, 1040, 4112, 8208})
        for (int n : {1, 7, 130}) {
          const fp8_case c{dt, m, k, n, (m + n) % 2 ? 1.0f : 0.0f};
          const fp8_operands o = make_fp8_operands(c, 0, seed++);
          dev_vec<uint16_t> dx(o.x);
          dev_vec<uint8_t> dq(o.q);
          dev_vec<float> ds(o.scale), dy(o.y0);
          ASSERT_TRUE(cuda::fp8_gemv_supported(dx.get(), c.m, c.k, dq.get()));
          ASSERT_EQ(cuda::fp8_gemv(c.dt, dx.get(), c.m, c.k, dq.get(), ds.get(), c.n, dy.get(), c.beta, nullptr), 0);
          expect_matches(c, o, 0, false, dy.download(), 3e-5, "fp8_gemv");
        }
}

TEST_F(CudaFp8Linear, GemvRefusesOperandsItCannotStream) {
  dev_vec<uint16_t> buf(8192);
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.get());
  EXPECT_FALSE(cuda::fp8_gemv_supported(buf.get(), 1, 24, bytes));       // k % 16
  EXPECT_FALSE(cuda::fp8_gemv_supported(buf.get() + 1, 1, 64, bytes));   // x misaligned
  EXPECT_FALSE(cuda::fp8_gemv_supported(buf.get(), 1, 64, bytes + 8));   // weights misaligned
  EXPECT_FALSE(cuda::fp8_gemv_supported(buf.get(), cuda::fp8_gemv_max_m + 1, 64, bytes));
  EXPECT_FALSE(cuda::fp8_gemv_supported(buf.get(), 0, 64, bytes));
  EXPECT_TRUE(cuda::fp8_gemv_supported(buf.get(), cuda::fp8_gemv_max_m, 64, bytes));
}

TEST_F(CudaFp8Linear, DequantizeRoundsEachWeightOnce) {
  uint32_t seed = 50;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int k : {13, 64, 1001}) {
      const fp8_case c{dt, 1, k, 37, 0.0f};
      const fp8_operands o = make_fp8_operands(c, 0, seed++);
      dev_vec<uint8_t> dq(o.q);
      dev_vec<float> ds(o.scale);
      dev_vec<uint16_t> out(o.q.size());
      ASSERT_EQ(cuda::fp8_dequantize(dt, dq.get(), ds.get(), c.n, c.k, out.get(), nullptr), 0);
      const auto got = out.download();
      for (int r = 0; r < c.n; ++r)
        for (int col = 0; col < c.k; ++col) {
          const size_t i = size_t(r) * c.k + col;
          ASSERT_EQ(got[i], to_act_bits(dt, weight(c, o, r, col, false))) << "k=" << k << " row " << r << " col " << col;
        }
    }
}

TEST_F(CudaFp8Linear, GemmRunnerAgreesWithReferenceOnBothPaths) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, 1 << 22).ok());
  std::vector<fp8_case> cases;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 3, 8, 12, 40})
      for (int k : {13, 64, 1001, 4096}) cases.push_back({dt, m, k, 67, m % 2 ? 0.0f : 1.0f});
  for (const auto& c : cases) ASSERT_TRUE(g.reserve_fp8_scratch(c.dt, size_t(c.n) * c.k).ok());
  uint32_t seed = 100;
  for (const auto& c : cases)
    for (int x_offset : {0, 1}) {  // 1: x starts mid-chunk, so the GEMV must decline
      const fp8_operands o = make_fp8_operands(c, x_offset, seed++);
      dev_vec<uint16_t> dx(o.x);
      dev_vec<uint8_t> dq(o.q);
      dev_vec<float> ds(o.scale), dy(o.y0);
      const cuda::device_weight w{dq.get(), ds.get()};
      const uint16_t* x = dx.get() + x_offset;
      const int64_t mma_before = g.fp8_gemv_mma_runs();
      ASSERT_TRUE(g.run(c.dt, x, c.m, c.k, w, c.n, dy.get(), c.beta).ok());
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      // The GEMVs (CUDA cores, or tensor cores up to 8 rows) multiply the exact E4M3 weights.
      const bool gemv = g.fp8_gemv_mma_runs() > mma_before ||
                        (cuda::fp8_gemv_by_default(c.m) && cuda::fp8_gemv_supported(x, c.m, c.k, dq.get()));
      expect_matches(c, o, x_offset, !gemv, dy.download(), 3e-5, gemv ? "runner (fp8 gemv)" : "runner (fp8 GEMM or cuBLAS)");
      // run_act: always the dequantized weights, the output rounded once to dt.
      const fp8_case act_case{c.dt, c.m, c.k, c.n, 0.0f};
      dev_vec<uint16_t> dya(size_t(c.m) * c.n);
      ASSERT_TRUE(g.run_act(c.dt, x, c.m, c.k, w, c.n, dya.get()).ok());
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      expect_matches(act_case, o, x_offset, true, download_act(c.dt, dya), 1e-2, "runner run_act");
    }
  cudaStreamDestroy(s);
}

TEST_F(CudaFp8Linear, BlockScaledGemvMatchesFp64ReferenceOverRaggedBlocks) {
  uint32_t seed = 300;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m = 1; m <= cuda::fp8_gemv_max_m; ++m)
      for (int k : {16, 144, 400, 4112})
        for (int n : {1, 7, 130, 300}) {
          const fp8_case c{dt, m, k, n, (m + n) % 2 ? 1.0f : 0.0f, true};
          const fp8_operands o = make_fp8_operands(c, 0, seed++);
          dev_vec<uint16_t> dx(o.x);
          dev_vec<uint8_t> dq(o.q);
          dev_vec<float> ds(o.scale), dy(o.y0);
          ASSERT_TRUE(cuda::fp8_gemv_supported(dx.get(), c.m, c.k, dq.get()));
          ASSERT_EQ(cuda::fp8_gemv(c.dt, dx.get(), c.m, c.k, dq.get(), ds.get(), c.n, dy.get(), c.beta, nullptr,
                                   cuda::fp8_scale_mode::block128),
                    0);
          expect_matches(c, o, 0, false, dy.download(), 3e-5, "block-scaled fp8_gemv");
        }
}

TEST_F(CudaFp8Linear, BlockScaledDequantizeRoundsEachWeightOnce) {
  uint32_t seed = 400;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int k : {13, 200, 1001})
      for (int n : {37, 300}) {
        const fp8_case c{dt, 1, k, n, 0.0f, true};
        const fp8_operands o = make_fp8_operands(c, 0, seed++);
        dev_vec<uint8_t> dq(o.q);
        dev_vec<float> ds(o.scale);
        dev_vec<uint16_t> out(o.q.size());
        ASSERT_EQ(cuda::fp8_dequantize(dt, dq.get(), ds.get(), c.n, c.k, out.get(), nullptr,
                                       cuda::fp8_scale_mode::block128),
                  0);
        const auto got = out.download();
        for (int r = 0; r < c.n; ++r)
          for (int col = 0; col < c.k; ++col)
            ASSERT_EQ(got[size_t(r) * c.k + col], to_act_bits(dt, weight(c, o, r, col, false)))
                << "k=" << k << " n=" << n << " row " << r << " col " << col;
      }
}

// Every row count runs: the block-scaled GEMV below default_fp8_gemm_min_rows, dequantize + cuBLAS
// from it (fp8_dequantize_runs says which ran), and run_act through dequantize + cuBLAS at every m.
TEST_F(CudaFp8Linear, GemmRunnerRunsBlockScaledWeightsAtEveryRowCount) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, 1 << 22).ok());
  const int k = 400, n = 300;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    ASSERT_TRUE(g.reserve_fp8_scratch(dt, size_t(n) * k).ok());
  uint32_t seed = 500;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 8, 9, 16, 32, 33, 100, 257}) {
      const fp8_case c{dt, m, k, n, m % 2 ? 0.0f : 1.0f, true};
      const fp8_operands o = make_fp8_operands(c, 0, seed++);
      dev_vec<uint16_t> dx(o.x);
      dev_vec<uint8_t> dq(o.q);
      dev_vec<float> ds(o.scale), dy(o.y0);
      cuda::device_weight w;
      w.data = dq.get();
      w.block_scale = ds.get();
      ASSERT_TRUE(w.fp8() && w.block_scaled());
      const int64_t before = g.fp8_dequantize_runs();
      ASSERT_TRUE(g.run(c.dt, dx.get(), c.m, c.k, w, c.n, dy.get(), c.beta).ok());
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const bool gemv = cuda::fp8_gemv_by_default(m);
      EXPECT_EQ(g.fp8_dequantize_runs() - before, gemv ? 0 : 1) << "m=" << m;
      expect_matches(c, o, 0, !gemv, dy.download(), 3e-5, gemv ? "runner (block gemv)" : "runner (block cuBLAS)");
      const fp8_case act_case{c.dt, c.m, c.k, c.n, 0.0f, true};
      dev_vec<uint16_t> dya(size_t(c.m) * c.n);
      ASSERT_TRUE(g.run_act(c.dt, dx.get(), c.m, c.k, w, c.n, dya.get()).ok());
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      expect_matches(act_case, o, 0, true, download_act(c.dt, dya), 1e-2, "runner run_act (block)");
    }
  cudaStreamDestroy(s);
}

TEST_F(CudaFp8Linear, GemmRunnerTakesActDtypeWeightsAsBefore) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, 1 << 22).ok());
  const int m = 3, k = 64, n = 9;
  const std::vector<uint16_t> xb(size_t(m) * k, to_act_bits(cuda::act_dtype::bf16, 0.5f));
  const std::vector<uint16_t> wb(size_t(n) * k, to_act_bits(cuda::act_dtype::bf16, 0.25f));
  dev_vec<uint16_t> dx(xb), dw(wb);
  dev_vec<float> dy(size_t(m) * n);
  ASSERT_TRUE(g.run(cuda::act_dtype::bf16, dx.get(), m, k, cuda::device_weight{dw.get(), nullptr}, n, dy.get()).ok());
  for (float v : dy.download()) EXPECT_EQ(v, 0.125f * k);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace actorserve::testing
