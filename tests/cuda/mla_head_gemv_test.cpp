// The absorbed form's per-head GEMV (gpu/cuda/mla/head_gemv.hpp) against cuBLAS's strided-batched
// GEMM on the same operands (gemm_runner::run_batched, what the executor ran before it): W_UK's
// [k][n] blocks into fp32, W_UV's [n][k] blocks into the activation dtype, at DeepSeek-V2-Lite's
// shapes inside kv_b_proj's layout and at odd ones, 1 to 4 rows; mla_head_product's choice
// between the two; and the operands it refuses.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "stream_gemm_fixture.hpp"
#include "gpu/cuda/mla/head_gemv.hpp"
#include "gpu/cuda/mla/mla_attention.hpp"
#include "gpu/cuda/model/cuda_model.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

class CudaMlaHeadGemv : public stream_gemm_fixture<::testing::TestWithParam<act_dtype>> {};

/// One product's shape: heads, n, k, B's rows ([n][k] or [k][n]) and the rows of A and C.
struct product_shape {
  const char* name;
  int heads, n, k;
  bool b_rows_are_n;
  int b_rows_apart;   ///< ldb
  long long b_head;   ///< stride_b: kv_b_proj's per-head blocks, or packed
  int a_extra;        ///< A's rows lda = heads x (k + a_extra): the query's rope part past q_nope
  bool c_f32;
};

/// The product on `g` by both paths, C compared: the same fp32 sums in another order.
void expect_alike(act_dtype dt, cuda::gemm_runner& gemm, cudaStream_t s, const product_shape& p, int m) {
  SCOPED_TRACE(std::string(p.name) + ", " + std::to_string(m) + " rows");
  const int lda = p.heads * (p.k + p.a_extra), ldc = p.heads * p.n;
  const size_t b_elems = size_t(p.b_head) * p.heads;
  dev_vec<uint16_t> a(random_act_bits(dt, size_t(m) * lda, 11 + m, 1.0f));
  dev_vec<uint16_t> b(random_act_bits(dt, b_elems, 12, 0.05f));
  const size_t c_elems = size_t(m) * ldc;
  dev_vec<float> c32_gemv(c_elems), c32_blas(c_elems);
  dev_vec<uint16_t> c16_gemv(c_elems), c16_blas(c_elems);
  cuda::head_gemv_args g{.batch = p.heads, .m = m, .n = p.n, .k = p.k, .a = a.get(), .lda = lda,
                         .stride_a = p.k + p.a_extra, .b = b.get(), .b_rows_are_n = p.b_rows_are_n,
                         .ldb = p.b_rows_apart, .stride_b = p.b_head, .c = nullptr, .c_f32 = p.c_f32, .ldc = ldc,
                         .stride_c = p.n};
  g.c = p.c_f32 ? static_cast<void*>(c32_gemv.get()) : static_cast<void*>(c16_gemv.get());
  ASSERT_TRUE(cuda::mla_head_gemv_supported(g));
  c32_gemv.poison();
  c16_gemv.poison();
  ASSERT_EQ(cuda::mla_head_gemv(dt, g, s), 0);
  void* blas_c = p.c_f32 ? static_cast<void*>(c32_blas.get()) : static_cast<void*>(c16_blas.get());
  ASSERT_TRUE(gemm.run_batched(dt, g.batch, m, g.n, g.k, g.a, g.lda, g.stride_a, g.b, g.b_rows_are_n, g.ldb,
                               g.stride_b, blas_c, g.c_f32, g.ldc, g.stride_c)
                  .ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> got = p.c_f32 ? c32_gemv.download() : download_act(dt, c16_gemv);
  const std::vector<float> want = p.c_f32 ? c32_blas.download() : download_act(dt, c16_blas);
  // fp32 sums of up to 1,024 products in two orders; a 16-bit C rounds them once more.
  EXPECT_LT(rel_max_err(got, want), p.c_f32 ? 1e-5 : (dt == act_dtype::bf16 ? 8e-3 : 1e-3));
}

TEST_P(CudaMlaHeadGemv, MatchesCublasStridedBatchedGemm) {
  const act_dtype dt = GetParam();
  // kv_b_proj of DeepSeek-V2-Lite: per head dn = 128 key rows then dv = 128 value rows of r = 512.
  const long long kv_b_head = (128 + 128) * 512;
  const product_shape shapes[] = {
      {"W_UK, V2-Lite", 16, 512, 128, false, 512, kv_b_head, 64, true},
      {"W_UV, V2-Lite", 16, 128, 512, true, 512, kv_b_head, 0, false},
      {"W_UV into fp32", 16, 128, 512, true, 512, kv_b_head, 0, true},
      // V2's 128 heads; the tiny fixture's widths (r 32, dn 16, dv 16); columns past one CTA's
      // 64 that end mid-CTA (n 264); an uneven k of [k][n] (k 72: 32 groups of rows, unequal) and n of
      // [n][k] (n 13).
      {"W_UK, 128 heads", 128, 512, 128, false, 512, kv_b_head, 64, true},
      {"W_UK, tiny", 4, 32, 16, false, 32, (16 + 16) * 32, 8, true},
      {"W_UV, tiny", 4, 16, 32, true, 32, (16 + 16) * 32, 0, false},
      {"[k][n], n past a CTA", 3, 264, 72, false, 264, 72 * 264, 0, true},
      {"[n][k], 13 columns", 5, 13, 40, true, 40, 13 * 40, 0, false},
  };
  for (const product_shape& p : shapes)
    for (int m = 1; m <= cuda::mla_head_gemv_max_rows; ++m) expect_alike(dt, gemm_, s_, p, m);
}

TEST_P(CudaMlaHeadGemv, RefusesWhatItCannotTakeAndTheProductFallsBackToCublas) {
  const act_dtype dt = GetParam();
  dev_vec<uint16_t> a(random_act_bits(dt, 8 * 16 * 128, 3)), b(random_act_bits(dt, 16 * 256 * 512 + 8, 4, 0.05f));
  dev_vec<float> c(8 * 16 * 512);
  const cuda::head_gemv_args ok{.batch = 16, .m = 1, .n = 512, .k = 128, .a = a.get(), .lda = 16 * 128,
                                .stride_a = 128, .b = b.get(), .b_rows_are_n = false, .ldb = 512,
                                .stride_b = 256 * 512, .c = c.get(), .c_f32 = true, .ldc = 16 * 512, .stride_c = 512};
  EXPECT_TRUE(cuda::mla_head_gemv_supported(ok));
  auto bad = ok;
  bad.m = cuda::mla_head_gemv_max_rows + 1;  // a prefill-sized step: cuBLAS's
  EXPECT_FALSE(cuda::mla_head_gemv_supported(bad));
  EXPECT_EQ(cuda::mla_head_gemv(dt, bad, s_), int(cudaErrorInvalidValue));
  bad = ok;
  bad.b = static_cast<const uint16_t*>(ok.b) + 1;  // B off its 16-byte boundary
  EXPECT_FALSE(cuda::mla_head_gemv_supported(bad));
  bad = ok;
  bad.n = 500;  // [k][n] rows not whole 8-element vectors
  bad.ldb = 500;
  EXPECT_FALSE(cuda::mla_head_gemv_supported(bad));
  bad = ok;
  bad.k = cuda::mla_head_gemv_max_k + 8;
  EXPECT_FALSE(cuda::mla_head_gemv_supported(bad));
  // mla_head_product gives 5 rows to cuBLAS: the same C as run_batched itself.
  dev_vec<uint16_t> a5(random_act_bits(dt, 5 * 16 * 128, 5));
  dev_vec<float> c5(5 * 16 * 512), want(5 * 16 * 512);
  auto five = ok;
  five.m = 5;
  five.a = a5.get();
  five.c = c5.get();
  ASSERT_TRUE(cuda::mla_head_product(gemm_, dt, five, s_).ok());
  ASSERT_TRUE(gemm_.run_batched(dt, 16, 5, 512, 128, a5.get(), 16 * 128, 128, b.get(), false, 512, 256 * 512,
                                want.get(), true, 16 * 512, 512)
                  .ok());
  EXPECT_EQ(count_unequal(c5.download(), want.download()), 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMlaHeadGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return std::string(info.param == act_dtype::bf16 ? "bf16" : "fp16"); });

}  // namespace
}  // namespace actorserve::testing
