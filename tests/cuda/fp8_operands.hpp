#pragma once
// Random FP8 E4M3 GEMV operands (codes, per-row or 128 x 128 block scales, activations, the
// output beforehand) and the fp64 reference the FP8 linear tests compare with
// (fp8_linear_test.cpp, fp8_gemv_bulk_test.cpp, fp8_gemv_mma_test.cpp), and the ring grids they run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/tuning.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {

/// A bulk-copy ring grid of the one-token GEMVs (bulk_gemv_tuning's other fields at their defaults).
inline gpu::bulk_gemv_tuning grid(int blocks_per_sm, int stages, bool evict_first) {
  gpu::bulk_gemv_tuning t;
  t.blocks_per_sm = blocks_per_sm;
  t.stages = stages;
  t.evict_first = evict_first;
  return t;
}
/// The ring grids the FP8 GEMV tests run: the default first; one stage (every stage waits for its
/// release), the most stages, one block an SM (many groups a block), 8 blocks an SM.
inline const gpu::bulk_gemv_tuning kGrids[] = {gpu::bulk_gemv_tuning{}, grid(1, 1, false), grid(1, 13, true),
                                               grid(2, 2, true), grid(8, 1, false)};

struct fp8_case {
  cuda::act_dtype dt;
  int m, k, n;
  float beta;
  bool block = false;  ///< scales per 128 x 128 block (fp8_scale_mode::block128), else per row
};

inline int scale_blocks(int n) { return (n + cuda::kFp8Block - 1) / cuda::kFp8Block; }

/// The index into the scales of weight (r, col).
inline size_t scale_index(const fp8_case& c, int r, int col) {
  if (!c.block) return size_t(r);
  return size_t(r / cuda::kFp8Block) * scale_blocks(c.k) + size_t(col / cuda::kFp8Block);
}

struct fp8_operands {
  std::vector<uint16_t> x;     ///< act-dtype bits, with `x_offset` leading pad elements
  std::vector<uint8_t> q;      ///< E4M3 codes [n][k], no NaN
  std::vector<float> scale;    ///< [n], or [ceil(n/128)][ceil(k/128)] per block
  std::vector<float> y0;       ///< Y beforehand (beta's input)
};

inline fp8_operands make_fp8_operands(const fp8_case& c, int x_offset, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  fp8_operands o;
  o.x.assign(size_t(x_offset) + size_t(c.m) * c.k, 0);
  for (size_t i = 0; i < size_t(c.m) * c.k; ++i) o.x[x_offset + i] = to_act_bits(c.dt, ud(rng));
  o.q.resize(size_t(c.n) * c.k);
  for (auto& v : o.q) {
    v = uint8_t(rng() & 0xffu);
    if (gpu::e4m3_is_nan(v)) v = 0x7e;  // the largest finite value
  }
  o.scale.resize(c.block ? size_t(scale_blocks(c.n)) * scale_blocks(c.k) : size_t(c.n));
  // Scales of vLLM's size (amax / 448), one in seven zero; block scales spread over 2^-4..2^4 so
  // that a block scale applied to the wrong block's sum shows.
  for (size_t r = 0; r < o.scale.size(); ++r) {
    const float spread = c.block ? std::ldexp(1.0f, int(r % 9) - 4) : 1.0f;
    o.scale[r] = r % 7 == 3 ? 0.0f : (0.5f + ud(rng) * 0.25f) / gpu::e4m3_max * spread;
  }
  o.y0.resize(size_t(c.m) * c.n);
  for (auto& v : o.y0) v = ud(rng) * 4.0f;
  return o;
}

/// Weight (r, c) as the GEMV sees it (exact) or as the cuBLAS path does (rounded once to dt).
inline float weight(const fp8_case& c, const fp8_operands& o, int r, int col, bool rounded) {
  const float w = gpu::e4m3_to_f32(o.q[size_t(r) * c.k + col]) * o.scale[scale_index(c, r, col)];
  return rounded ? round_act(c.dt, w) : w;
}

/// Every output within fp32 accumulation error (`rel` of sum |x w|) of the fp64 reference.
inline void expect_matches(const fp8_case& c, const fp8_operands& o, int x_offset, bool rounded_weights,
                    const std::vector<float>& got, double rel, const char* what) {
  ASSERT_EQ(got.size(), size_t(c.m) * c.n);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = 0, a = 0;
      for (int q = 0; q < c.k; ++q) {
        const double xv = from_act_bits(c.dt, o.x[x_offset + size_t(i) * c.k + q]);
        const double wv = weight(c, o, j, q, rounded_weights);
        s += xv * wv;
        a += std::abs(xv * wv);
      }
      const size_t idx = size_t(i) * c.n + j;
      const double ref = s + double(c.beta) * o.y0[idx];
      const double scale = a + std::abs(double(c.beta) * o.y0[idx]);
      ASSERT_TRUE(std::isfinite(got[idx])) << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " at " << idx;
      ASSERT_NEAR(got[idx], ref, rel * scale + 1e-6)
          << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " beta=" << c.beta << " at " << idx;
    }
}

}  // namespace actorserve::testing
