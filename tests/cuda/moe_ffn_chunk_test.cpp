// The sparse layer's FFN on the device with the experts run in chunks of tokens: the same bits
// as in one piece, across chunk boundaries, on the fixtures' real routers and experts (greedy and
// group-limited routing), on the batched path (chunks taking other tiles than the whole step)
// and on the one-token kernels' path.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/moe/moe_ffn.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class CudaMoeFfn : public ::testing::Test {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    ASSERT_EQ(cudaStreamCreate(&s_), cudaSuccess);
    ASSERT_TRUE(gemm_.init(s_, 1 << 22).ok());
  }
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
    if (s_) cudaStreamDestroy(s_);
  }
  /// An FFN of the layer's experts for up to `max_tokens` tokens, in chunks of `chunk_tokens`.
  void init(cuda::moe_ffn& ffn, const cuda::device_model& m, int max_tokens, int chunk_tokens) {
    const cuda::moe_ffn::alloc_fn alloc = [&](size_t bytes, void** out) -> status {
      if (cudaMalloc(out, bytes) != cudaSuccess) return make_error(error_code::out_of_memory, "moe_ffn buffers");
      buffers_.push_back(*out);
      return {};
    };
    const auto st = ffn.init(*m.cfg.moe, int(m.cfg.hidden_size), m.dt, max_tokens, alloc, chunk_tokens);
    ASSERT_TRUE(st.ok()) << st.err().message;
  }
  /// The layer's output for `rows` tokens of x, written or added into a copy of `residual`.
  std::vector<float> run(cuda::moe_ffn& ffn, const cuda::device_experts& w, const dev_vec<uint16_t>& x, int rows,
                         const std::vector<float>& residual, bool accumulate) {
    dev_vec<float> out(residual);
    if (!accumulate) out.poison();
    const auto st = ffn.run(gemm_, w, x.get(), rows, out.get(), accumulate, s_);
    EXPECT_TRUE(st.ok()) << st.err().message;
    return out.download();
  }
  cudaStream_t s_ = nullptr;
  cuda::gemm_runner gemm_;
  std::vector<void*> buffers_;
};

TEST_F(CudaMoeFfn, ChunkedExpertsGiveTheBitsOfOnePiece) {
  std::mt19937 rng(43);
  for (const char* model : {"mixtral-bf16", "qwen3-moe-bf16", "deepseek-v2-qlora-yarn-bf16"}) {
    SCOPED_TRACE(model);
    auto loaded = cuda::load_device_model(model_dir(model), dtype_choice::auto_detect, false, s_);
    ASSERT_TRUE(loaded.ok()) << loaded.err().message;
    const cuda::device_model& m = *loaded.value();
    ASSERT_TRUE(m.cfg.moe.has_value());
    const int hidden = int(m.cfg.hidden_size);
    const cuda::device_layer* sparse = nullptr;
    for (const cuda::device_layer& l : m.layers)
      if (l.experts.router && !sparse) sparse = &l;
    ASSERT_NE(sparse, nullptr);
    // (tokens, chunk, GEMV rows): 1,100 tokens give these fixtures 275 to 412 rows an expert (the
    // 128-row tile) in one piece; chunks of 300 give 75 to 112 (64 rows) and the last chunk of
    // 200 tokens 50 to 75. Seven tokens with the one-token kernels forced: chunks of 3, 3 and 1.
    struct chunk_case {
      int rows, chunk, gemv_rows;
    };
    for (const chunk_case c : {chunk_case{1100, 300, 1}, chunk_case{7, 3, 8}}) {
      const std::string what = std::to_string(c.rows) + " tokens in chunks of " + std::to_string(c.chunk) +
                               (c.gemv_rows > 1 ? ", one-token kernels" : "");
      SCOPED_TRACE(what);
      gemm_.set_gemv_max_rows(c.gemv_rows);
      cuda::moe_ffn whole, chunked;
      init(whole, m, c.rows, cuda::moe_ffn_chunk_tokens);
      init(chunked, m, c.rows, c.chunk);
      const dev_vec<uint16_t> x(random_act_bits(m.dt, size_t(c.rows) * hidden, rng()));
      std::vector<float> residual(size_t(c.rows) * hidden);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : residual) v = nd(rng);
      for (bool accumulate : {false, true}) {
        const auto want = run(whole, sparse->experts, x, c.rows, residual, accumulate);
        const auto got = run(chunked, sparse->experts, x, c.rows, residual, accumulate);
        for (float v : want) ASSERT_TRUE(std::isfinite(v)) << (accumulate ? "accumulated" : "written");
        EXPECT_EQ(count_unequal(got, want), 0) << (accumulate ? "accumulated" : "written");
        if (accumulate) {
          EXPECT_GT(count_unequal(want, residual), 0) << "the experts added nothing";
        }
      }
      gemm_.set_gemv_max_rows(cuda::default_gemv_max_rows);
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
