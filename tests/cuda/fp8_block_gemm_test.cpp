// Block-scaled FP8 weights (128 x 128 block scales) past the GEMV: the activation quantizer's
// per-128 groups bit for bit against the host's rounding, and gemm_runner at row counts where
// cuBLASLt's block-scaled GEMM may or may not have an algorithm (1, 9, 16, 32, 33, 100, 257), each
// checked against an fp64 reference of the path that ran: the GEMV (exact weights), the
// block-scaled GEMM (the host's group codes times the weight codes, both scales per k-block) or
// dequantize + cuBLAS (weights rounded once to the activation dtype).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
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

constexpr int kB = cuda::kFp8Block;

int blocks(int n) { return (n + kB - 1) / kB; }

/// Group codes and scales as the host rounds them: scale[g * m + i] = amax / 448 over elements
/// [128 g, 128 g + 128) of row i, codes e4m3_encode(x / scale).
struct group_codes {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

group_codes quantize_groups_host(cuda::act_dtype dt, const std::vector<uint16_t>& x, int m, int k) {
  group_codes a;
  a.q.resize(size_t(m) * k);
  a.scale.resize(size_t(blocks(k)) * m);
  for (int i = 0; i < m; ++i)
    for (int g = 0; g < blocks(k); ++g) {
      const int c0 = g * kB, c1 = std::min(k, c0 + kB);
      float amax = 0.0f;
      for (int c = c0; c < c1; ++c) {
        const float v = from_act_bits(dt, x[size_t(i) * k + c]);
        if (!std::isnan(v)) amax = std::max(amax, std::abs(v));
      }
      const float s = amax / gpu::e4m3_max;
      a.scale[size_t(g) * m + i] = s;
      for (int c = c0; c < c1; ++c)
        a.q[size_t(i) * k + c] = amax == 0.0f ? 0 : gpu::e4m3_encode(from_act_bits(dt, x[size_t(i) * k + c]) / s);
    }
  return a;
}

/// Rows of mixed magnitudes (2^-4..2^4 within a row, so groups get different scales), a zero row,
/// and a row whose one huge element leaves the rest of its group tiny.
std::vector<uint16_t> rows_of(cuda::act_dtype dt, int m, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  std::vector<uint16_t> x(size_t(m) * k);
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < k; ++c) {
      float v = ud(rng) * std::ldexp(1.0f, int(rng() % 9) - 4);
      if (i % 5 == 1) v = 0.0f;
      if (i % 5 == 3) v = c == k / 2 ? 300.0f : v * 1e-3f;
      x[size_t(i) * k + c] = to_act_bits(dt, v);
    }
  return x;
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

class CudaFp8BlockGemm : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaFp8BlockGemm, GroupCodesAndScalesMatchTheHostBitForBit) {
  uint32_t seed = 1;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int k : {8, 120, 128, 400, 1024, 4104})
      for (int m : {1, 4, 19}) {
        const auto x = rows_of(dt, m, k, seed++);
        const group_codes want = quantize_groups_host(dt, x, m, k);
        dev_vec<uint16_t> dx(x);
        dev_vec<uint8_t> dq(size_t(m) * k);
        dev_vec<float> ds(want.scale.size());
        dq.poison();
        ds.poison();
        ASSERT_EQ(cuda::fp8_quantize_activations(dt, dx.get(), m, k, dq.get(), ds.get(), nullptr,
                                                 cuda::fp8_act_scales::per_128, m),
                  0);
        const auto q = dq.download();
        const auto s = ds.download();
        for (size_t i = 0; i < s.size(); ++i)
          ASSERT_EQ(bits_of(s[i]), bits_of(want.scale[i])) << "k=" << k << " group " << i / m << " row " << i % m;
        for (size_t i = 0; i < q.size(); ++i)
          ASSERT_EQ(int(q[i]), int(want.q[i])) << "k=" << k << " row " << i / size_t(k) << " col " << i % size_t(k);
      }
}

/// A random E4M3 weight [n][k] (no NaN codes) and its 128 x 128 block scales, powers of two
/// cycling over `spread` exponents from 2^-(spread / 2), divided by 448.
struct block_weight {
  std::vector<uint8_t> q;
  std::vector<float> ws;
};

block_weight random_block_weight(int n, int k, int spread, std::mt19937& rng) {
  block_weight w{std::vector<uint8_t>(size_t(n) * k), std::vector<float>(size_t(blocks(n)) * blocks(k))};
  for (auto& v : w.q) v = uint8_t(rng() % 0x7e) | uint8_t(rng() & 0x80u);
  for (size_t b = 0; b < w.ws.size(); ++b) w.ws[b] = std::ldexp(1.0f, int(b % spread) - spread / 2) / gpu::e4m3_max;
  return w;
}

enum class path { gemv, lt, dequantized };

/// Y within the path's error of its fp64 reference: `rel` of the sum of |terms| (fp32
/// accumulation) plus, for a 16-bit output, its rounding.
void expect_path_matches(cuda::act_dtype dt, path p, int m, int k, int n, const std::vector<uint16_t>& x,
                         const std::vector<uint8_t>& q, const std::vector<float>& ws, const std::vector<float>& got,
                         bool out16) {
  const group_codes a = quantize_groups_host(dt, x, m, k);
  const double round16 = out16 ? (dt == cuda::act_dtype::bf16 ? 0x1p-8 : 0x1p-11) : 0.0;
  const double rel = p == path::lt ? 1e-3 : 3e-5;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0, abs_sum = 0;
      for (int t = 0; t < k; ++t) {
        const double w_scale = ws[size_t(j / kB) * blocks(k) + t / kB];
        const double code = gpu::e4m3_to_f32(q[size_t(j) * k + t]);
        double term = 0;
        if (p == path::lt) {
          term = double(gpu::e4m3_to_f32(a.q[size_t(i) * k + t])) * a.scale[size_t(t / kB) * m + i] * code * w_scale;
        } else {
          const float w = float(code * w_scale);  // exact: the scales are powers of two
          term = double(from_act_bits(dt, x[size_t(i) * k + t])) * (p == path::gemv ? w : round_act(dt, w));
        }
        ref += term;
        abs_sum += std::abs(term);
      }
      const double v = got[size_t(i) * n + j];
      ASSERT_TRUE(std::isfinite(v)) << "m=" << m << " k=" << k << " at " << i << ", " << j;
      ASSERT_NEAR(v, ref, rel * abs_sum + round16 * std::abs(ref) + 1e-6)
          << "path " << int(p) << " m=" << m << " k=" << k << " n=" << n << " at row " << i << " col " << j;
    }
}

// Every row count runs, whichever path takes it: the GEMV up to 8 rows; past them cuBLASLt's
// block-scaled GEMM where k % 512 == 0 and the heuristic returns an algorithm (m % 4 != 0 padded
// through the scratch), else dequantize + cuBLAS. Exactly one path runs per call (the counters
// say which), and every m from 32 rows at k = 1024 takes cuBLASLt, whole groups of 4 or not
// (fewer rows may find no algorithm at this small n).
TEST_F(CudaFp8BlockGemm, EveryRowCountRunsOnSomePath) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, size_t(32) << 20).ok());
  const int n = 272, max_m = 257, max_k = 1024;
  ASSERT_TRUE(g.reserve_fp8_activations(max_m, max_k).ok());
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    ASSERT_TRUE(g.reserve_fp8_scratch(dt, size_t(n) * max_k).ok());
  uint32_t seed = 100;
  int lt_runs = 0;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int k : {400, max_k})
      for (int m : {1, 9, 16, 32, 33, 100, 257}) {
        std::mt19937 rng(seed++);
        const auto x = rows_of(dt, m, k, seed);
        const auto [q, ws] = random_block_weight(n, k, 7, rng);
        dev_vec<uint16_t> dx(x);
        dev_vec<uint8_t> dq(q);
        dev_vec<float> dws(ws), dy(size_t(m) * n);
        cuda::device_weight w;
        w.data = dq.get();
        w.block_scale = dws.get();
        for (bool out16 : {false, true}) {
          const int64_t lt0 = g.fp8_gemm_runs(), deq0 = g.fp8_dequantize_runs();
          std::vector<float> got;
          if (out16) {
            dev_vec<uint16_t> dya(size_t(m) * n);
            ASSERT_TRUE(g.run_act(dt, dx.get(), m, k, w, n, dya.get()).ok());
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
            got = download_act(dt, dya);
          } else {
            ASSERT_TRUE(g.run(dt, dx.get(), m, k, w, n, dy.get()).ok());
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
            got = dy.download();
          }
          const int64_t lt = g.fp8_gemm_runs() - lt0, deq = g.fp8_dequantize_runs() - deq0;
          const bool lt_allowed = k % cuda::fp8_gemm_block_k_multiple == 0;
          const bool gemv = !out16 && cuda::fp8_gemv_by_default(m);
          EXPECT_EQ(lt + deq, gemv ? 0 : 1) << "m=" << m << " k=" << k;
          EXPECT_TRUE(lt_allowed || lt == 0) << "cuBLASLt ran a shape it refuses: m=" << m << " k=" << k;
          EXPECT_TRUE(!lt_allowed || m < 32 || lt == 1) << "a block-scaled shape cuBLASLt takes fell back: m=" << m;
          const path p = gemv ? path::gemv : lt ? path::lt : path::dequantized;
          lt_runs += int(lt);
          expect_path_matches(dt, p, m, k, n, x, q, ws, got, out16);
        }
      }
  std::printf("block-scaled cuBLASLt GEMMs run: %d\n", lt_runs);
  cudaStreamDestroy(s);
}

// Rows past what the pad scratch holds split into the first m - m % 4 rows and a second pass over
// the last 32; with beta the fp32 output adds to what Y held, for the rows of both passes. The
// scratch here holds 128 fp32 rows of n (256 of 16 bits), so in fp32 m = 125 (128 padded rows)
// takes one padded pass and m = 129..259 split; in 16 bits (run_act) 125..131 pad and 259
// splits; m = 256 needs no padding.
TEST_F(CudaFp8BlockGemm, RowsPastThePadScratchSplitIntoTwoPasses) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(s, size_t(32) << 20).ok());
  const int n = 272, k = 1024, max_m = 259;
  ASSERT_TRUE(g.reserve_fp8_activations(max_m, k).ok());
  ASSERT_TRUE(g.reserve_fp8_scratch(cuda::act_dtype::bf16, size_t(128) * n * sizeof(float) / 2).ok());
  uint32_t seed = 500;
  for (auto dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16})
    for (int m : {125, 129, 130, 131, 256, 259})
      for (float beta : {0.0f, 1.0f}) {
        std::mt19937 rng(seed++);
        const auto x = rows_of(dt, m, k, seed);
        const auto [q, ws] = random_block_weight(n, k, 5, rng);
        std::vector<float> y0(size_t(m) * n);
        for (size_t i = 0; i < y0.size(); ++i) y0[i] = float(int(i % 97) - 48);
        dev_vec<uint16_t> dx(x);
        dev_vec<uint8_t> dq(q);
        dev_vec<float> dws(ws), dy(y0);
        cuda::device_weight w;
        w.data = dq.get();
        w.block_scale = dws.get();
        const int64_t lt0 = g.fp8_gemm_runs(), deq0 = g.fp8_dequantize_runs();
        ASSERT_TRUE(g.run(dt, dx.get(), m, k, w, n, dy.get(), beta).ok()) << "m=" << m;
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        EXPECT_EQ(g.fp8_gemm_runs() - lt0, 1) << "m=" << m;
        EXPECT_EQ(g.fp8_dequantize_runs() - deq0, 0) << "m=" << m;
        auto got = dy.download();
        for (size_t i = 0; i < got.size(); ++i) got[i] -= beta * y0[i];
        expect_path_matches(dt, path::lt, m, k, n, x, q, ws, got, false);
        if (beta != 0.0f) continue;
        dev_vec<uint16_t> dya(size_t(m) * n);
        ASSERT_TRUE(g.run_act(dt, dx.get(), m, k, w, n, dya.get()).ok()) << "m=" << m;
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        EXPECT_EQ(g.fp8_gemm_runs() - lt0, 2) << "m=" << m;
        EXPECT_EQ(g.fp8_dequantize_runs() - deq0, 0) << "m=" << m;
        expect_path_matches(dt, path::lt, m, k, n, x, q, ws, download_act(dt, dya), true);
      }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace actorserve::testing
