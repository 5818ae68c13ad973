// The FP8 tensor-core GEMM (gpu/cuda/linear/fp8_gemm.hpp) and its per-token activation quantizer
// (fp8_quantize_activations, fp8_linear.hpp): the quantizer's codes and scales bit for bit against
// the host's rounding (amax / 448, gpu::e4m3_encode of x / scale) over random, zero, huge, tiny,
// infinite and NaN rows; the GEMM through gemm_runner against an fp64 reference over the same
// codes at awkward m, n and k (k and n multiples of 16, as cuBLASLt's FP8 kernels need), with and
// without beta and with the output in fp32 or the activation dtype; the fall-back to dequantize +
// cuBLAS where the GEMM cannot run; and a CUDA graph capture of the GEMM replaying to the same bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_gemm.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {
namespace {

/// Per-token codes and scales as the host rounds them.
struct act_codes {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

act_codes quantize_host(cuda::act_dtype dt, const std::vector<uint16_t>& x, int m, int k) {
  act_codes a;
  a.q.resize(size_t(m) * k);
  a.scale.resize(size_t(m));
  for (int i = 0; i < m; ++i) {
    float amax = 0.0f;
    for (int c = 0; c < k; ++c) {
      const float v = from_act_bits(dt, x[size_t(i) * k + c]);
      if (!std::isnan(v)) amax = std::max(amax, std::abs(v));
    }
    const float s = amax / gpu::e4m3_max;
    a.scale[size_t(i)] = s;
    for (int c = 0; c < k; ++c) {
      const float v = from_act_bits(dt, x[size_t(i) * k + c]);
      a.q[size_t(i) * k + c] = amax == 0.0f ? 0 : gpu::e4m3_encode(v / s);
    }
  }
  return a;
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

/// Activation rows that exercise the quantizer: random, all zero, negative zeros, one huge
/// element among tiny ones, tiny (subnormal in dt) elements, and, with `specials`, an infinity
/// and a NaN.
std::vector<uint16_t> activation_rows(cuda::act_dtype dt, int m, int k, bool specials, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const bool bf = dt == cuda::act_dtype::bf16;
  const float huge = bf ? 1e30f : 60000.0f, tiny = bf ? 1e-39f : 3e-7f;
  std::vector<uint16_t> x(size_t(m) * k);
  for (int i = 0; i < m; ++i) {
    uint16_t* row = x.data() + size_t(i) * k;
    const int kind = i % 8;
    for (int c = 0; c < k; ++c) {
      float v = ud(rng) * std::ldexp(1.0f, int(rng() % 9) - 4);
      if (kind == 1) v = 0.0f;
      if (kind == 2) v = -0.0f;
      if (kind == 3) v = c == k / 2 ? huge : v * 1e-3f;
      if (kind == 4) v = tiny * float(int(rng() % 7) - 3);
      row[c] = to_act_bits(dt, v);
    }
    if (specials && kind == 5) row[k / 3] = to_act_bits(dt, -std::numeric_limits<float>::infinity());
    if (specials && kind == 6) row[k - 1] = to_act_bits(dt, std::numeric_limits<float>::quiet_NaN());
  }
  return x;
}

class CudaFp8Gemm : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaFp8Gemm, ActivationCodesAndScalesMatchTheHostBitForBit) {
  uint32_t seed = 1;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int k : {8, 16, 48, 1040, 4096, 14336})
      for (int m : {1, 8, 19}) {
        const auto x = activation_rows(dt, m, k, true, seed++);
        const act_codes want = quantize_host(dt, x, m, k);
        dev_vec<uint16_t> dx(x);
        dev_vec<uint8_t> dq(size_t(m) * k);
        dev_vec<float> ds(static_cast<size_t>(m));
        dq.poison();
        ds.poison();
        ASSERT_TRUE(cuda::fp8_quantize_activations_supported(dx.get(), k));
        ASSERT_EQ(cuda::fp8_quantize_activations(dt, dx.get(), m, k, dq.get(), ds.get(), nullptr), 0);
        const auto q = dq.download();
        const auto s = ds.download();
        for (int i = 0; i < m; ++i)
          ASSERT_EQ(bits_of(s[size_t(i)]), bits_of(want.scale[size_t(i)])) << "k=" << k << " row " << i;
        for (size_t i = 0; i < q.size(); ++i)
          ASSERT_EQ(int(q[i]), int(want.q[i])) << "k=" << k << " row " << i / size_t(k) << " col " << i % size_t(k);
      }
}

TEST_F(CudaFp8Gemm, QuantizerRefusesWhatItCannotLoad) {
  dev_vec<uint16_t> buf(64);
  EXPECT_FALSE(cuda::fp8_quantize_activations_supported(buf.get(), 12));     // k % 8
  EXPECT_FALSE(cuda::fp8_quantize_activations_supported(buf.get() + 4, 16));  // 8-byte aligned only
  EXPECT_TRUE(cuda::fp8_quantize_activations_supported(buf.get() + 8, 16));
}

struct gemm_case {
  cuda::act_dtype dt;
  int m, k, n;
  float beta;
};

struct gemm_operands {
  std::vector<uint16_t> x;   ///< act-dtype bits [m][k]
  std::vector<uint8_t> q;    ///< E4M3 codes [n][k], no NaN
  std::vector<float> scale;  ///< [n]
  std::vector<float> y0;     ///< Y beforehand (beta's input)
};

gemm_operands make_operands(const gemm_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  gemm_operands o;
  o.x = activation_rows(c.dt, c.m, c.k, false, seed);
  o.q.resize(size_t(c.n) * c.k);
  for (auto& v : o.q) {
    v = uint8_t(rng() & 0xffu);
    if (gpu::e4m3_is_nan(v)) v = 0x7e;
  }
  o.scale.resize(size_t(c.n));
  for (int r = 0; r < c.n; ++r) o.scale[size_t(r)] = r % 7 == 3 ? 0.0f : (0.5f + ud(rng) * 0.25f) / gpu::e4m3_max;
  o.y0.resize(size_t(c.m) * c.n);
  for (auto& v : o.y0) v = ud(rng) * 4.0f;
  return o;
}

/// Every output within `rel` of the sum of |terms| (fp32 accumulation; the tensor cores' FP8
/// products are exact and cuBLASLt promotes the partial sums to fp32) plus, for a 16-bit output,
/// its rounding (relative, or half the subnormal spacing), of the fp64 product of the host's per-token codes with the weight codes.
void expect_gemm_matches(const gemm_case& c, const gemm_operands& o, const std::vector<float>& got, bool out16,
                         double rel, const char* what) {
  const act_codes a = quantize_host(c.dt, o.x, c.m, c.k);
  ASSERT_EQ(got.size(), size_t(c.m) * c.n);
  const double round16 = out16 ? (c.dt == cuda::act_dtype::bf16 ? 0x1p-8 : 0x1p-11) : 0.0;
  // Below the 16-bit type's normal range the output rounds on a fixed grid (fp16: 2^-24 apart).
  const double subnormal16 = out16 ? (c.dt == cuda::act_dtype::bf16 ? 0x1p-134 : 0x1p-25) : 0.0;
  std::vector<double> xv(a.q.size()), wv(o.q.size());
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = gpu::e4m3_to_f32(a.q[i]);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = gpu::e4m3_to_f32(o.q[i]);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = 0, abs_sum = 0;
      for (int t = 0; t < c.k; ++t) {
        const double p = xv[size_t(i) * c.k + t] * wv[size_t(j) * c.k + t];
        s += p;
        abs_sum += std::abs(p);
      }
      const double sc = double(a.scale[size_t(i)]) * o.scale[size_t(j)];
      const size_t idx = size_t(i) * c.n + j;
      const double ref = s * sc + double(c.beta) * o.y0[idx];
      const double tol = rel * (abs_sum * sc + std::abs(double(c.beta) * o.y0[idx])) + round16 * std::abs(ref) + subnormal16 + 1e-30;
      ASSERT_TRUE(std::isfinite(got[idx])) << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " at " << idx;
      ASSERT_NEAR(got[idx], ref, tol) << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " beta=" << c.beta
                                      << " at row " << i << " col " << j;
    }
}

constexpr int kMaxRows = 300, kMaxK = 4096;

TEST_F(CudaFp8Gemm, MatchesTheReferenceOverAwkwardShapes) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, size_t(32) << 20).ok());
  ASSERT_TRUE(g.reserve_fp8_activations(kMaxRows, kMaxK).ok());
  g.set_fp8_paths(0, 1);  // the FP8 GEMM at every m
  std::vector<gemm_case> cases;
  uint32_t seed = 200;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {1, 9, 17, 100, 257})
      for (int k : {16, 48, 1040, 4096})
        for (int n : {16, 48, 208}) cases.push_back({dt, m, k, n, (m + n / 16) % 2 ? 1.0f : 0.0f});
  cases.push_back({cuda::act_dtype::bf16, 33, 4096, 1024, 1.0f});
  for (const auto& c : cases) {
    const gemm_operands o = make_operands(c, seed++);
    dev_vec<uint16_t> dx(o.x);
    dev_vec<uint8_t> dq(o.q);
    dev_vec<float> ds(o.scale), dy(o.y0);
    const cuda::device_weight w{dq.get(), ds.get()};
    const int64_t before = g.fp8_gemm_runs();
    ASSERT_TRUE(g.run(c.dt, dx.get(), c.m, c.k, w, c.n, dy.get(), c.beta).ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(g.fp8_gemm_runs(), before + 1) << "cuBLASLt ran no FP8 GEMM for m=" << c.m << " k=" << c.k
                                             << " n=" << c.n << " (outer-vector scales refused?)";
    expect_gemm_matches(c, o, dy.download(), false, 1e-3, "run (fp32 out)");
    const gemm_case act_case{c.dt, c.m, c.k, c.n, 0.0f};
    dev_vec<uint16_t> dya(size_t(c.m) * c.n);
    dya.poison();
    ASSERT_TRUE(g.run_act(c.dt, dx.get(), c.m, c.k, w, c.n, dya.get()).ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(g.fp8_gemm_runs(), before + 2);
    expect_gemm_matches(act_case, o, download_act(c.dt, dya), true, 1e-3, "run_act (dt out)");
  }
  cudaStreamDestroy(s);
}

TEST_F(CudaFp8Gemm, FallsBackToDequantizeWhereItCannotRun) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, size_t(32) << 20).ok());
  ASSERT_TRUE(g.reserve_fp8_activations(64, 256).ok());
  ASSERT_TRUE(g.reserve_fp8_scratch(cuda::act_dtype::bf16, size_t(256) * 256).ok());
  struct fallback {
    int m, k, n, x_offset;
    const char* why;
  };
  const fallback cases[] = {{12, 40, 32, 0, "k % 16"},       {12, 64, 40, 0, "n % 16"},
                            {12, 64, 32, 1, "x misaligned"}, {65, 64, 32, 0, "rows past the reserve"},
                            {40, 512, 32, 0, "m x k past the reserve"}};
  uint32_t seed = 900;
  for (const fallback& f : cases) {
    const gemm_case c{cuda::act_dtype::bf16, f.m, f.k, f.n, 0.0f};
    const gemm_operands o = make_operands(c, seed++);
    std::vector<uint16_t> xp(size_t(f.x_offset), 0);
    xp.insert(xp.end(), o.x.begin(), o.x.end());
    dev_vec<uint16_t> dx(xp);
    dev_vec<uint8_t> dq(o.q);
    dev_vec<float> ds(o.scale);
    dev_vec<float> dy(size_t(c.m) * c.n);
    const int64_t before = g.fp8_gemm_runs();
    ASSERT_TRUE(g.run(c.dt, dx.get() + f.x_offset, c.m, c.k, cuda::device_weight{dq.get(), ds.get()}, c.n, dy.get())
                    .ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(g.fp8_gemm_runs(), before) << f.why;
    // The dequantized path: bf16 activations as they are, weights rounded once to bf16.
    const auto got = dy.download();
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) {
        double ref = 0, abs_sum = 0;
        for (int t = 0; t < c.k; ++t) {
          const double w = round_act(c.dt, gpu::e4m3_to_f32(o.q[size_t(j) * c.k + t]) * o.scale[size_t(j)]);
          const double p = double(from_act_bits(c.dt, o.x[size_t(i) * c.k + t])) * w;
          ref += p;
          abs_sum += std::abs(p);
        }
        ASSERT_NEAR(got[size_t(i) * c.n + j], ref, 3e-5 * abs_sum + 1e-30) << f.why << " row " << i << " col " << j;
      }
  }
  cudaStreamDestroy(s);
}

TEST_F(CudaFp8Gemm, CapturedInAGraphReplaysToTheSameBits) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, size_t(32) << 20).ok());
  ASSERT_TRUE(g.reserve_fp8_activations(64, 1024).ok());
  const gemm_case c{cuda::act_dtype::bf16, 40, 1024, 256, 0.0f};
  const gemm_operands o = make_operands(c, 77);
  dev_vec<uint16_t> dx(o.x);
  dev_vec<uint8_t> dq(o.q);
  dev_vec<float> ds(o.scale), dy(size_t(c.m) * c.n), dy_graph(size_t(c.m) * c.n);
  const cuda::device_weight w{dq.get(), ds.get()};
  // Captured first, so the shape's descriptors and heuristic query happen inside the capture.
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const bool ran = g.run(c.dt, dx.get(), c.m, c.k, w, c.n, dy_graph.get()).ok();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_TRUE(ran);
  EXPECT_EQ(g.fp8_gemm_runs(), 1);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  dy_graph.poison();
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_TRUE(g.run(c.dt, dx.get(), c.m, c.k, w, c.n, dy.get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(count_unequal(dy.download(), dy_graph.download()), 0);
  expect_gemm_matches(c, o, dy_graph.download(), false, 1e-3, "graph replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace actorserve::testing
