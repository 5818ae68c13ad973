// The one-token FP8 GEMV on the bulk-copy ring (gpu/cuda/linear/fp8_gemv_bulk.hpp) against
// fp8_gemv (m = 1) on the same random operands, bit for bit, with groups of 4 and of 8 weight rows
// under several ring grids (blocks per SM, stages from 1 to 13, evict-first copies), and against
// the fp64 reference: k with partial and single-chunk slices, n not a multiple of either group and
// with more groups than blocks, per-row and 128 x 128 block scales, bf16 and fp16 activations,
// beta 0 and 1. Then its refusals, and gemm_runner's routing of one-token FP8 GEMVs through it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "cuda_test_util.hpp"
#include "fp8_operands.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;
using cuda::fp8_scale_mode;

/// The FP8 GEMV's weight rows per group (bulk_gemv_tuning::fp8_rows).
constexpr int kGroupRows[] = {4, 8};


std::string describe(const fp8_case& c, const gpu::bulk_gemv_tuning& g) {
  return std::string(c.dt == act_dtype::bf16 ? "bf16" : "fp16") + (c.block ? " block128" : " per_row") +
         " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) + " beta=" + std::to_string(c.beta) + " grid (" +
         std::to_string(g.blocks_per_sm) + ", " + std::to_string(g.stages) + (g.evict_first ? ", evict first" : "") +
         ", " + std::to_string(g.fp8_rows) + " rows a group)";
}

/// A CUDA stream destroyed on scope exit.
struct stream_owner {
  cudaStream_t s = nullptr;
  stream_owner() { EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess); }
  ~stream_owner() { cudaStreamDestroy(s); }
  stream_owner(const stream_owner&) = delete;
  stream_owner& operator=(const stream_owner&) = delete;
};

fp8_scale_mode mode_of(const fp8_case& c) { return c.block ? fp8_scale_mode::block128 : fp8_scale_mode::per_row; }

class CudaFp8BulkGemv : public ::testing::Test {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    if (!gpu::runs_tma(cuda::loaded_gpu_target())) GTEST_SKIP() << "the bulk-copy engine needs compute capability 9.x";
  }
};

TEST_F(CudaFp8BulkGemv, EqualsFp8GemvBitForBitAndMatchesFp64Reference) {
  uint32_t seed = 700;
  for (auto dt : {act_dtype::bf16, act_dtype::fp16})
    for (bool block : {false, true})
      // 16: one chunk; 48 and 1040: fewer chunks than threads; 4112: a second slice of one chunk;
      // 8208: three slices, the last partial.
      for (int k : {16, 48, 1040, 4112, 8208})
        for (int n : {1, 7, 130, 1030})
          for (float beta : {0.0f, 1.0f}) {
            const fp8_case c{dt, 1, k, n, beta, block};
            const fp8_operands o = make_fp8_operands(c, 0, seed++);
            dev_vec<uint16_t> dx(o.x);
            dev_vec<uint8_t> dq(o.q);
            dev_vec<float> ds(o.scale), dy_ref(o.y0), dy;
            ASSERT_TRUE(cuda::fp8_gemv_bulk_supported(dx.get(), c.k, dq.get()));
            ASSERT_EQ(cuda::fp8_gemv(dt, dx.get(), 1, k, dq.get(), ds.get(), n, dy_ref.get(), beta, nullptr,
                                     mode_of(c)),
                      0);
            const std::vector<float> want = dy_ref.download();
            for (const int rows : kGroupRows)
              for (size_t grid_index = 0; grid_index < std::size(kGrids); ++grid_index) {
                gpu::bulk_gemv_tuning g = kGrids[grid_index];
                g.fp8_rows = rows;
                if (beta == 0.0f) {
                  dy.resize(size_t(n));
                  dy.poison();  // beta 0 neither reads y nor leaves an output unwritten
                } else {
                  dy.upload(o.y0);
                }
                ASSERT_EQ(cuda::fp8_gemv_bulk(dt, dx.get(), k, dq.get(), ds.get(), n, dy.get(), beta, nullptr,
                                              mode_of(c), g),
                          0)
                    << describe(c, g);
                const std::vector<float> got = dy.download();
                EXPECT_EQ(count_unequal(got, want), 0) << describe(c, g);
                if (grid_index == 0) expect_matches(c, o, 0, false, got, 3e-5, describe(c, g).c_str());
              }
          }
}

TEST_F(CudaFp8BulkGemv, RefusesOperandsTheRingCannotCopy) {
  dev_vec<uint16_t> buf(8192);
  dev_vec<float> scale(64), y(64);
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.get());
  EXPECT_TRUE(cuda::fp8_gemv_bulk_supported(buf.get(), 64, bytes));
  EXPECT_FALSE(cuda::fp8_gemv_bulk_supported(buf.get(), 24, bytes));      // k % 16
  EXPECT_FALSE(cuda::fp8_gemv_bulk_supported(buf.get(), 0, bytes));       // no k
  EXPECT_FALSE(cuda::fp8_gemv_bulk_supported(buf.get() + 1, 64, bytes));  // x misaligned
  EXPECT_FALSE(cuda::fp8_gemv_bulk_supported(buf.get(), 64, bytes + 8));  // weight rows misaligned
  // A refused call launches nothing: y keeps its poison.
  y.poison();
  const std::vector<float> before = y.download();
  for (const fp8_scale_mode mode : {fp8_scale_mode::per_row, fp8_scale_mode::block128}) {
    EXPECT_EQ(cuda::fp8_gemv_bulk(act_dtype::bf16, buf.get(), 24, bytes, scale.get(), 64, y.get(), 0.0f, nullptr,
                                  mode),
              int(cudaErrorInvalidValue));
    EXPECT_EQ(cuda::fp8_gemv_bulk(act_dtype::fp16, buf.get() + 1, 64, bytes, scale.get(), 64, y.get(), 0.0f, nullptr,
                                  mode),
              int(cudaErrorInvalidValue));
    EXPECT_EQ(cuda::fp8_gemv_bulk(act_dtype::bf16, buf.get(), 64, bytes + 8, scale.get(), 64, y.get(), 0.0f, nullptr,
                                  mode),
              int(cudaErrorInvalidValue));
  }
  // Groups of 4 or 8 rows only.
  for (const int rows : {0, 2, 5, 16}) {
    gpu::bulk_gemv_tuning t;
    t.fp8_rows = rows;
    EXPECT_EQ(cuda::fp8_gemv_bulk(act_dtype::bf16, buf.get(), 64, bytes, scale.get(), 64, y.get(), 0.0f, nullptr,
                                  fp8_scale_mode::per_row, t),
              int(cudaErrorInvalidValue))
        << rows << " rows a group";
  }
  EXPECT_EQ(count_unequal(y.download(), before), 0);
}

// gemm_runner takes the ring (4 or 8 rows a group) for one aligned token with bulk_gemv().fp8 on,
// and fp8_gemv for two rows, a misaligned token (dequantize + cuBLAS then) or the flag off (its
// group size then unread); the m = 1 outputs are the same bits every way.
TEST_F(CudaFp8BulkGemv, GemmRunnerRoutesOneTokenThroughTheRing) {
  const int k = 1040, n = 300;
  stream_owner stream;
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(stream.s, 1 << 22).ok());
  ASSERT_TRUE(g.reserve_fp8_scratch(act_dtype::bf16, size_t(n) * k).ok());  // the same bytes for fp16
  uint32_t seed = 900;
  for (auto dt : {act_dtype::bf16, act_dtype::fp16})
    for (bool block : {false, true})
      for (int m : {1, 2}) {
        const fp8_case c{dt, m, k, n, 1.0f, block};
        for (int x_offset : {0, 1}) {
          const fp8_operands o = make_fp8_operands(c, x_offset, seed++);
          dev_vec<uint16_t> dx(o.x);
          dev_vec<uint8_t> dq(o.q);
          dev_vec<float> ds(o.scale);
          cuda::device_weight w;
          w.data = dq.get();
          (block ? w.block_scale : w.row_scale) = ds.get();
          const uint16_t* x = dx.get() + x_offset;
          std::vector<float> outs[3];  // the ring off, with 4 rows a group, with 8
          for (const int variant : {1, 2, 0}) {
            const bool ring = variant != 0;
            gpu::bulk_gemv_tuning t;
            t.fp8 = ring;
            t.fp8_rows = 4 * variant;  // 0, refused by the ring, with the ring off
            t.fp8_mma_min_rows = 0;    // the CUDA-core ring (fp8_gemv_mma_test.cpp routes the other)
            g.set_bulk_gemv(t);
            dev_vec<float> dy(o.y0);
            const int64_t before = g.fp8_gemv_bulk_runs();
            ASSERT_TRUE(g.run(dt, x, m, k, w, n, dy.get(), c.beta).ok());
            ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
            const bool want_ring = ring && m == 1 && x_offset == 0;
            EXPECT_EQ(g.fp8_gemv_bulk_runs() - before, want_ring ? 1 : 0)
                << "m=" << m << " x offset " << x_offset << " fp8_rows " << t.fp8_rows
                << (ring ? " ring on" : " ring off");
            outs[variant] = dy.download();
            expect_matches(c, o, x_offset, x_offset != 0, outs[variant], 3e-5, "gemm_runner");
          }
          for (const int variant : {1, 2})
            EXPECT_EQ(count_unequal(outs[variant], outs[0]), 0)
                << "m=" << m << (block ? " block128" : " per_row") << " fp8_rows " << 4 * variant;
        }
      }
}

}  // namespace
}  // namespace actorserve::testing
