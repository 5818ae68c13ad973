// The decode GEMV (gpu/cuda/linear/gemv_kernel.hpp) and gemm_runner's dispatch against an fp64 CPU
// reference over awkward shapes: k not a multiple of the 256-element block stride, n not a
// multiple of the rows per block, m between the kernel's row templates, beta accumulation, and
// operands the GEMV cannot take (k % 8 != 0, misaligned rows), which must fall back to cuBLAS.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::testing {
namespace {

struct gemm_case {
  cuda::act_dtype dt;
  int m, k, n;
  float beta;
};

struct operands {
  std::vector<uint16_t> x, w;  ///< act-dtype bits, x with `x_offset` leading pad elements
  std::vector<float> y0;       ///< Y before the call (beta's input)
  std::vector<double> ref;     ///< fp64 X W^T + beta Y0 over the rounded inputs
  std::vector<double> scale;   ///< sum |x||w| per output: the rounding error's scale
};

operands make_operands(const gemm_case& c, int x_offset, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  operands o;
  o.x.assign(size_t(x_offset) + size_t(c.m) * c.k, 0);
  o.w.resize(size_t(c.n) * c.k);
  o.y0.resize(size_t(c.m) * c.n);
  for (size_t i = 0; i < size_t(c.m) * c.k; ++i) o.x[x_offset + i] = to_act_bits(c.dt, ud(rng));
  for (auto& v : o.w) v = to_act_bits(c.dt, ud(rng));
  for (auto& v : o.y0) v = ud(rng) * 4.0f;
  o.ref.resize(o.y0.size());
  o.scale.resize(o.y0.size());
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = 0, a = 0;
      for (int q = 0; q < c.k; ++q) {
        const double xv = from_act_bits(c.dt, o.x[x_offset + size_t(i) * c.k + q]);
        const double wv = from_act_bits(c.dt, o.w[size_t(j) * c.k + q]);
        s += xv * wv;
        a += std::abs(xv * wv);
      }
      const size_t idx = size_t(i) * c.n + j;
      o.ref[idx] = s + double(c.beta) * o.y0[idx];
      o.scale[idx] = a + std::abs(double(c.beta) * o.y0[idx]);
    }
  return o;
}

/// Every output within fp32 accumulation error of the fp64 reference.
void expect_matches(const gemm_case& c, const operands& o, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(got.size(), o.ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " at " << i;
    ASSERT_NEAR(got[i], o.ref[i], 3e-5 * o.scale[i] + 1e-6)
        << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " beta=" << c.beta << " at " << i;
  }
}

std::vector<gemm_case> awkward_cases() {
  std::vector<gemm_case> cases;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 2, 3, 5, 8})
      for (int k : {8, 24, 1000, 4104})
        for (int n : {1, 7, 130}) cases.push_back({dt, m, k, n, (m + n) % 2 ? 1.0f : 0.0f});
  return cases;
}

class CudaGemv : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaGemv, MatchesFp64ReferenceOverAwkwardShapes) {
  uint32_t seed = 1;
  for (const auto& c : awkward_cases())
    for (int rows_per_block : {1, 2, 4}) {
      const operands o = make_operands(c, 0, seed++);
      dev_vec<uint16_t> dx(o.x), dw(o.w);
      dev_vec<float> dy(o.y0);
      ASSERT_TRUE(cuda::gemv_supported(dx.get(), c.m, c.k, dw.get()));
      ASSERT_EQ(cuda::gemv(c.dt, dx.get(), c.m, c.k, dw.get(), c.n, dy.get(), c.beta, nullptr, rows_per_block), 0);
      expect_matches(c, o, dy.download(), rows_per_block == 1 ? "gemv r1" : rows_per_block == 2 ? "gemv r2" : "gemv r4");
    }
}

TEST_F(CudaGemv, RefusesOperandsItCannotStream) {
  dev_vec<uint16_t> buf(4096);
  EXPECT_FALSE(cuda::gemv_supported(buf.get(), 1, 13, buf.get()));        // k % 8
  EXPECT_FALSE(cuda::gemv_supported(buf.get() + 1, 1, 64, buf.get()));    // x misaligned
  EXPECT_FALSE(cuda::gemv_supported(buf.get(), 1, 64, buf.get() + 3));    // w misaligned
  EXPECT_FALSE(cuda::gemv_supported(buf.get(), cuda::gemv_max_m + 1, 64, buf.get()));
  EXPECT_FALSE(cuda::gemv_supported(buf.get(), 0, 64, buf.get()));
  EXPECT_TRUE(cuda::gemv_supported(buf.get(), cuda::gemv_max_m, 64, buf.get()));
}

TEST_F(CudaGemv, GemmRunnerAgreesWithReferenceOnBothPaths) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, 1 << 22).ok());
  std::vector<gemm_case> cases;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 3, 4, 6, 12})
      for (int k : {13, 64, 1001, 4096}) cases.push_back({dt, m, k, 67, m % 2 ? 0.0f : 1.0f});
  uint32_t seed = 100;
  for (const auto& c : cases)
    for (int x_offset : {0, 1})  // 1: x starts mid-chunk, so the GEMV must decline
      for (int rows : {0, cuda::gemv_max_m}) {
        const operands o = make_operands(c, x_offset, seed++);
        dev_vec<uint16_t> dx(o.x), dw(o.w);
        dev_vec<float> dy(o.y0);
        g.set_gemv_max_rows(rows);
        ASSERT_TRUE(g.run(c.dt, dx.get() + x_offset, c.m, c.k, dw.get(), c.n, dy.get(), c.beta).ok());
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        expect_matches(c, o, dy.download(), rows ? "runner (gemv allowed)" : "runner (cuBLAS)");
      }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace actorserve::testing
