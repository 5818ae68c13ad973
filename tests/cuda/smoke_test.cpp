// The bundle's first GPU test: our own kernel and a cuBLAS bf16 GEMM against CPU results.
// Skips (does not fail) where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/smoke.hpp"

namespace cuda = actorserve::gpu::cuda;

namespace {

float round_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  bits &= 0xffff0000u;
  std::memcpy(&v, &bits, 4);
  return v;
}

class CudaSmoke : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_F(CudaSmoke, ReportsDevice) {
  auto p = cuda::properties(0);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", p.name.c_str(), p.sm_major, p.sm_minor,
              p.num_sms, p.total_memory / 1073741824.0);
  EXPECT_GT(p.num_sms, 0);
}

TEST_F(CudaSmoke, AxpyKernelMatchesCpu) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) { x[i] = dist(rng); y[i] = dist(rng); }
  auto out = cuda::device_axpy(1.5f, x, y);
  ASSERT_TRUE(out.ok()) << out.err().message;
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::max<double>(max_err, std::abs(out.value()[i] - (1.5f * x[i] + y[i])));
  std::printf("axpy n=%d max abs err %.3g\n", n, max_err);
  EXPECT_LT(max_err, 1e-5);
}

TEST_F(CudaSmoke, CublasBf16GemmMatchesCpu) {
  const int m = 256, n = 384, k = 512;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  std::vector<float> a(size_t(m) * k), b(size_t(k) * n);
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  auto out = cuda::device_gemm_bf16(a, b, m, n, k);
  ASSERT_TRUE(out.ok()) << out.err().message;
  double num = 0, den = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += double(round_bf16(a[size_t(i) * k + p])) * round_bf16(b[size_t(p) * n + j]);
      double d = out.value()[size_t(i) * n + j] - ref;
      num += d * d;
      den += ref * ref;
    }
  double rel = std::sqrt(num / den);
  std::printf("cuBLAS bf16 GEMM %dx%dx%d relative L2 error vs fp64 of bf16 inputs: %.3g\n", m, n, k, rel);
  EXPECT_LT(rel, 1e-5);
}

}  // namespace
