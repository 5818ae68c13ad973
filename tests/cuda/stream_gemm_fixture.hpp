#pragma once
// A test fixture's stream and the cuBLAS runner on it, for tests of code that takes both.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/cuda_model.hpp"

namespace actorserve::testing {

/// Base = ::testing::Test or ::testing::TestWithParam<P>. Skips without a CUDA device.
template <class Base = ::testing::Test>
class stream_gemm_fixture : public Base {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    ASSERT_EQ(cudaStreamCreate(&s_), cudaSuccess);
    ASSERT_TRUE(gemm_.init(s_, 1 << 22).ok());
  }
  void TearDown() override {
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t s_ = nullptr;
  gpu::cuda::gemm_runner gemm_;
};

}  // namespace actorserve::testing
