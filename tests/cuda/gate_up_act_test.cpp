// The batched MLP's 16-bit gate_up path: gemm_runner::run_act (cuBLAS writing bf16/fp16) and
// silu_and_mul_act against CPU references on the same rounded operands, and the pair against the
// fp32 path (gemm_runner::run + silu_and_mul) it replaces for m > 1.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

/// Random values already rounded to dt, as host bits and as floats.
struct act_vec {
  std::vector<uint16_t> bits;
  std::vector<float> vals;
};

act_vec random_act(act_dtype dt, size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  act_vec v;
  v.bits.resize(n);
  v.vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    v.bits[i] = to_act_bits(dt, d(rng));
    v.vals[i] = from_act_bits(dt, v.bits[i]);
  }
  return v;
}

class CudaGateUpAct : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaGateUpAct, SiluAndMulOfRoundedGateUpMatchesCpu) {
  const act_dtype dt = GetParam();
  // inter % 8 == 0 takes the 16-byte kernel; 340 and 342 the scalar one.
  for (const int inter : {344, 14336 / 16, 340, 342}) {
    for (const int n : {1, 3, 257}) {
      const act_vec gu = random_act(dt, size_t(n) * 2 * inter, uint32_t(inter + n), 3.0f);
      dev_vec<uint16_t> d_gu(gu.bits), d_out(size_t(n) * inter);
      d_out.poison();
      ASSERT_EQ(cuda::silu_and_mul_act(dt, d_gu.get(), n, inter, d_out.get(), nullptr), 0);
      const auto out = download_act(dt, d_out);
      size_t worse = 0;
      for (int t = 0; t < n; ++t)
        for (int i = 0; i < inter; ++i) {
          const double g = gu.vals[size_t(t) * 2 * inter + i], u = gu.vals[size_t(t) * 2 * inter + inter + i];
          const float ref = float(g / (1 + std::exp(-g)) * u);
          const float got = out[size_t(t) * inter + i];
          // One rounding of the fp32 result to dt: within half an ulp of the rounded reference.
          const float tol = std::fabs(ref) * (dt == act_dtype::bf16 ? 4e-3f : 1e-3f) + 1e-6f;
          worse += !(std::fabs(got - ref) <= tol);
        }
      EXPECT_EQ(worse, 0u) << "inter " << inter << " n " << n;
    }
  }
}

TEST_P(CudaGateUpAct, RunActMatchesReferenceAndTheFp32Path) {
  const act_dtype dt = GetParam();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, 1 << 22).ok());
  g.set_gemv_max_rows(0);
  struct shape { int m, k, inter; };
  for (const shape sh : {shape{2, 64, 48}, shape{17, 4096, 344}, shape{256, 1024, 1000}}) {
    const int n = 2 * sh.inter;
    const act_vec x = random_act(dt, size_t(sh.m) * sh.k, 11, 1.0f);
    const act_vec w = random_act(dt, size_t(n) * sh.k, 12, 1.0f / std::sqrt(float(sh.k)));
    dev_vec<uint16_t> dx(x.bits), dw(w.bits), dy(size_t(sh.m) * n), act16(size_t(sh.m) * sh.inter),
        act32(size_t(sh.m) * sh.inter);
    dev_vec<float> dy32(size_t(sh.m) * n);
    dy.poison();
    act16.poison();
    ASSERT_TRUE(g.run_act(dt, dx.get(), sh.m, sh.k, dw.get(), n, dy.get()).ok());
    ASSERT_EQ(cuda::silu_and_mul_act(dt, dy.get(), sh.m, sh.inter, act16.get(), s), 0);
    ASSERT_TRUE(g.run(dt, dx.get(), sh.m, sh.k, dw.get(), n, dy32.get()).ok());
    ASSERT_EQ(cuda::silu_and_mul(dt, dy32.get(), sh.m, sh.inter, act32.get(), s), 0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const auto y = download_act(dt, dy);
    double max_err = 0, max_ref = 0;
    for (int i = 0; i < sh.m; ++i)
      for (int j = 0; j < n; ++j) {
        double ref = 0;
        for (int k = 0; k < sh.k; ++k) ref += double(x.vals[size_t(i) * sh.k + k]) * w.vals[size_t(j) * sh.k + k];
        max_err = std::max(max_err, std::fabs(y[size_t(i) * n + j] - ref));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    // fp32 accumulation, one rounding to dt: relative to the largest output, a few dt ulps.
    EXPECT_LT(max_err / max_ref, dt == act_dtype::bf16 ? 8e-3 : 1.5e-3) << "m " << sh.m << " k " << sh.k;
    const auto a16 = download_act(dt, act16), a32 = download_act(dt, act32);
    double diff = 0, amax = 0;
    for (size_t i = 0; i < a16.size(); ++i) {
      diff = std::max(diff, double(std::fabs(a16[i] - a32[i])));
      amax = std::max(amax, double(std::fabs(a32[i])));
    }
    EXPECT_LT(diff / amax, dt == act_dtype::bf16 ? 2e-2 : 4e-3) << "16-bit vs fp32 gate_up, m " << sh.m;
  }
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGateUpAct, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

}  // namespace
}  // namespace actorserve::testing
