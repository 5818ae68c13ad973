// Qwen3's per-head q/k RMSNorm kernel against an fp32 host reference: bias first, q and k heads
// normalised with their own weights, v given its bias only.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.hpp"
#include "gpu/cuda/ops/qk_norm.hpp"

namespace actorserve::testing {
namespace {

class CudaQkNorm : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST_F(CudaQkNorm, NormalisesEachQAndKHeadAfterTheBias) {
  std::mt19937 rng(17);
  for (int D : {16, 32, 64, 128, 256}) {
    for (bool with_bias : {false, true}) {
      const int n = 37, H = 8, KVH = 2, width = (H + 2 * KVH) * D;
      const float eps = 1e-6f;
      auto qkv = randn(size_t(n) * width, rng);
      const auto bias = randn(size_t(width), rng), qw = randn(size_t(D), rng), kw = randn(size_t(D), rng);
      dev_vec<float> d_qkv(qkv), d_bias(bias), d_qw(qw), d_kw(kw);
      cuda::qk_norm_args a;
      a.qkv = d_qkv.get();
      a.bias = with_bias ? d_bias.get() : nullptr;
      a.q_weight = d_qw.get();
      a.k_weight = d_kw.get();
      a.eps = eps;
      a.n = n;
      a.num_heads = H;
      a.num_kv_heads = KVH;
      a.head_dim = D;
      ASSERT_EQ(cuda::qk_rmsnorm(a, nullptr), 0);
      for (int t = 0; t < n; ++t) {
        float* row = &qkv[size_t(t) * width];
        if (with_bias)
          for (int i = 0; i < width; ++i) row[i] += bias[size_t(i)];
        for (int h = 0; h < H + KVH; ++h) {
          float* x = row + size_t(h) * D;
          double ss = 0;
          for (int i = 0; i < D; ++i) ss += double(x[i]) * x[i];
          const float inv = float(1.0 / std::sqrt(ss / D + eps));
          const std::vector<float>& w = h < H ? qw : kw;
          for (int i = 0; i < D; ++i) x[i] = w[size_t(i)] * (x[i] * inv);
        }
      }
      EXPECT_LT(rel_max_err(d_qkv.download(), qkv), 1e-5) << "head_dim " << D << (with_bias ? " with bias" : "");
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
