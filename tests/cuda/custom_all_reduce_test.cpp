// The one-shot all-reduce (gpu/cuda/parallel/custom_all_reduce.hpp) with 2 and 4 ranks on ONE
// GPU (one thread and one stream per rank, as single-GPU machines run the sharded executor):
// bitwise rank-order sums on every rank, graph replays with new inputs, the gather, and abort()
// and the timeout ending a rank whose peer never comes.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "collective_test_util.hpp"
#include "cuda_test_util.hpp"
#include "gpu/cuda/parallel/collective_group.hpp"
#include "gpu/cuda/parallel/custom_all_reduce.hpp"

namespace actorserve::testing {
namespace {

using ranks_t = std::vector<std::unique_ptr<cuda::custom_all_reduce>>;

ranks_t make_on_device0(int num_ranks, cuda::custom_all_reduce_options options = {}) {
  auto made = cuda::make_custom_all_reduce(std::vector<int>(static_cast<size_t>(num_ranks), 0), options);
  EXPECT_TRUE(made.ok()) << made.err().message;
  return made ? std::move(made.value()) : ranks_t{};
}

struct reduce_case {
  int ranks;
  size_t n;
  size_t offset;  ///< floats past the buffer's start: 1 leaves it unaligned for float4
};

class OneShotAllReduce : public ::testing::TestWithParam<reduce_case> {};

TEST_P(OneShotAllReduce, EveryRankHoldsTheRankOrderSumBitwise) {
  AS_REQUIRE_CUDA();
  const auto [num_ranks, n, offset] = GetParam();
  std::vector<std::vector<float>> parts;
  for (int r = 0; r < num_ranks; ++r) parts.push_back(random_floats(n, 100 + r));
  const auto want = rank_order_sum(parts);
  auto ranks = make_on_device0(num_ranks);
  ASSERT_EQ(ranks.size(), size_t(num_ranks));
  std::vector<std::unique_ptr<rank_resources>> res;
  for (int r = 0; r < num_ranks; ++r) res.push_back(std::make_unique<rank_resources>(0, n + offset));
  std::vector<std::vector<float>> got(num_ranks, std::vector<float>(n));
  std::vector<status> enqueued(num_ranks);
  run_ranks(num_ranks, [&](int r) {
    cudaSetDevice(0);
    float* buf = res[r]->buffer + offset;
    cudaMemcpyAsync(buf, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice, res[r]->stream);
    enqueued[r] = ranks[r]->all_reduce_sum(buf, n, res[r]->stream);
    cudaMemcpyAsync(got[r].data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, res[r]->stream);
    cudaStreamSynchronize(res[r]->stream);
  });
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_TRUE(enqueued[r].ok()) << enqueued[r].err().message;
    auto err = ranks[r]->async_error();
    EXPECT_TRUE(err.ok()) << err.err().message;
    EXPECT_EQ(count_unequal(got[r], want), 0) << "rank " << r;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(OneDevice, OneShotAllReduce,
                         ::testing::Values(reduce_case{2, 1, 0}, reduce_case{2, 8192, 0}, reduce_case{2, 256 * 8192, 0},
                                           reduce_case{4, 1, 0}, reduce_case{4, 8192, 0}, reduce_case{4, 256 * 8192, 0},
                                           reduce_case{2, 1001, 1}, reduce_case{4, 8195, 1}),
                         [](const ::testing::TestParamInfo<reduce_case>& info) {
                           return std::to_string(info.param.ranks) + "ranks_" + std::to_string(info.param.n) +
                                  "floats" + (info.param.offset ? "_unaligned" : "");
                         });

TEST(OneShotAllReduceGraph, ReplaysThreeTimesWithNewInputs) {
  AS_REQUIRE_CUDA();
  constexpr int num_ranks = 2, replays = 3;
  constexpr size_t n = 8192;
  auto ranks = make_on_device0(num_ranks);
  ASSERT_EQ(ranks.size(), size_t(num_ranks));
  std::vector<std::unique_ptr<rank_resources>> res;
  for (int r = 0; r < num_ranks; ++r) res.push_back(std::make_unique<rank_resources>(0, n));
  // inputs[k][r]: rank r's part in replay k.
  std::vector<std::vector<std::vector<float>>> inputs(replays);
  for (int k = 0; k < replays; ++k)
    for (int r = 0; r < num_ranks; ++r) inputs[k].push_back(random_floats(n, 1000 * k + r));
  std::vector<std::vector<std::vector<float>>> got(replays, std::vector<std::vector<float>>(num_ranks));
  std::vector<std::string> failures(num_ranks);
  run_ranks(num_ranks, [&](int r) {
    cudaSetDevice(0);
    cudaStream_t s = res[r]->stream;
    float* buf = res[r]->buffer;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      failures[r] = "begin capture";
      return;
    }
    auto st = ranks[r]->all_reduce_sum(buf, n, s);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess || !st || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      failures[r] = st ? "capture failed" : st.err().message;
      // NOTE: the peer then waits at the barrier until the timeout: the test fails, it does not hang.
      if (graph) cudaGraphDestroy(graph);
      return;
    }
    for (int k = 0; k < replays; ++k) {
      got[k][r].resize(n);
      cudaMemcpyAsync(buf, inputs[k][r].data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
      cudaGraphLaunch(exec, s);
      cudaMemcpyAsync(got[k][r].data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    }
    if (cudaStreamSynchronize(s) != cudaSuccess) failures[r] = "stream failed";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_EQ(failures[r], "") << "rank " << r;
    auto err = ranks[r]->async_error();
    EXPECT_TRUE(err.ok()) << err.err().message;
  }
  for (int k = 0; k < replays; ++k) {
    const auto want = rank_order_sum(inputs[k]);
    for (int r = 0; r < num_ranks; ++r) EXPECT_EQ(count_unequal(got[k][r], want), 0) << "replay " << k << " rank " << r;
  }
}

TEST(OneShotAllGather, EveryRankHoldsEveryPartInRankOrder) {
  AS_REQUIRE_CUDA();
  constexpr int num_ranks = 4;
  constexpr size_t n = 8195;  // not a multiple of 4: rows 1..3 start unaligned
  auto ranks = make_on_device0(num_ranks);
  ASSERT_EQ(ranks.size(), size_t(num_ranks));
  std::vector<std::vector<float>> parts;
  std::vector<float> want;
  for (int r = 0; r < num_ranks; ++r) {
    parts.push_back(random_floats(n, 7 + r));
    want.insert(want.end(), parts[r].begin(), parts[r].end());
  }
  std::vector<std::unique_ptr<rank_resources>> res;
  for (int r = 0; r < num_ranks; ++r) res.push_back(std::make_unique<rank_resources>(0, n * (num_ranks + 1)));
  std::vector<std::vector<float>> got(num_ranks, std::vector<float>(n * num_ranks));
  std::vector<status> enqueued(num_ranks);
  run_ranks(num_ranks, [&](int r) {
    cudaSetDevice(0);
    float* part = res[r]->buffer;
    float* out = res[r]->buffer + n;
    cudaMemcpyAsync(part, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice, res[r]->stream);
    enqueued[r] = ranks[r]->all_gather(part, n, out, res[r]->stream);
    cudaMemcpyAsync(got[r].data(), out, got[r].size() * sizeof(float), cudaMemcpyDeviceToHost, res[r]->stream);
    cudaStreamSynchronize(res[r]->stream);
  });
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_TRUE(enqueued[r].ok()) << enqueued[r].err().message;
    EXPECT_EQ(count_unequal(got[r], want), 0) << "rank " << r;
  }
}

/// Rank 0 enqueues an all-reduce that rank 1 never joins; `end_it` (run on the test thread while
/// rank 0's kernel waits) ends it. Returns the seconds rank 0's stream took to finish.
template <class F>
double lone_rank_seconds(ranks_t& ranks, F&& end_it) {
  rank_resources res(0, 1024);
  cudaMemsetAsync(res.buffer, 0, 1024 * sizeof(float), res.stream);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ranks[0]->all_reduce_sum(res.buffer, 1024, res.stream).ok());
  end_it();
  EXPECT_EQ(cudaStreamSynchronize(res.stream), cudaSuccess);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(OneShotAllReduceFailure, AbortEndsARankWaitingForOneThatNeverComes) {
  AS_REQUIRE_CUDA();
  auto ranks = make_on_device0(2);  // the default timeout: 5 s
  ASSERT_EQ(ranks.size(), 2u);
  const double seconds = lone_rank_seconds(ranks, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ranks[1]->abort();  // any rank's abort ends the group's waits
  });
  EXPECT_LT(seconds, 2.0) << "the kernel ended by its timeout, not by abort()";
  for (auto& rank : ranks) {
    auto err = rank->async_error();
    ASSERT_FALSE(err.ok());
    EXPECT_EQ(err.err().code, error_code::cancelled) << err.err().message;
  }
  rank_resources res(0, 16);
  auto st = ranks[0]->all_reduce_sum(res.buffer, 16, res.stream);
  EXPECT_FALSE(st.ok()) << "an aborted group refuses later calls";
}

TEST(OneShotAllReduceFailure, AWaitPastTheTimeoutFailsTheGroup) {
  AS_REQUIRE_CUDA();
  cuda::custom_all_reduce_options options;
  options.timeout_ns = 300ull * 1000 * 1000;
  auto ranks = make_on_device0(2, options);
  ASSERT_EQ(ranks.size(), 2u);
  const double seconds = lone_rank_seconds(ranks, [] {});
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 3.0);
  auto err = ranks[1]->async_error();
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.err().code, error_code::internal);
  EXPECT_NE(err.err().message.find("never came"), std::string::npos) << err.err().message;
}

TEST(OneShotAllReduceLimits, AMessageOverTheBufferIsRefusedAndNothingRuns) {
  AS_REQUIRE_CUDA();
  cuda::custom_all_reduce_options options;
  options.max_bytes = 4096;
  auto ranks = make_on_device0(2, options);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0]->max_elements(), 1024u);
  rank_resources res(0, 1025);
  auto st = ranks[0]->all_reduce_sum(res.buffer, 1025, res.stream);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, error_code::invalid_argument);
  EXPECT_EQ(cudaStreamSynchronize(res.stream), cudaSuccess);
  EXPECT_TRUE(ranks[0]->async_error().ok());
}

TEST(DeviceCollectives, RanksSharingOneGpuGetTheOneShotKernel) {
  AS_REQUIRE_CUDA();
  cuda::collective_group_options options;
  options.one_shot.max_bytes = 1 << 16;
  auto made = cuda::make_device_collectives({0, 0}, options);
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto& ranks = *made;
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1]->rank(), 1);
  EXPECT_EQ(ranks[1]->size(), 2);
  constexpr size_t n = 4096;
  std::vector<std::vector<float>> parts{random_floats(n, 1), random_floats(n, 2)};
  const auto want = rank_order_sum(parts);
  std::vector<std::unique_ptr<rank_resources>> res;
  for (int r = 0; r < 2; ++r) res.push_back(std::make_unique<rank_resources>(0, n + 16384));
  std::vector<std::vector<float>> got(2, std::vector<float>(n));
  std::vector<status> enqueued(2), too_big(2);
  run_ranks(2, [&](int r) {
    cudaSetDevice(0);
    cudaMemcpyAsync(res[r]->buffer, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice, res[r]->stream);
    enqueued[r] = ranks[r]->all_reduce_sum(res[r]->buffer, n, res[r]->stream);
    too_big[r] = ranks[r]->all_reduce_sum(res[r]->buffer, 16385, res[r]->stream);  // no NCCL on one GPU
    cudaMemcpyAsync(got[r].data(), res[r]->buffer, n * sizeof(float), cudaMemcpyDeviceToHost, res[r]->stream);
    cudaStreamSynchronize(res[r]->stream);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(enqueued[r].ok()) << enqueued[r].err().message;
    EXPECT_FALSE(too_big[r].ok());
    EXPECT_EQ(count_unequal(got[r], want), 0) << "rank " << r;
  }
}

TEST(DeviceCollectives, RanksSplitUnevenlyOverGpusAreRefused) {
  AS_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda::device_count() << " visible";
  auto made = cuda::make_device_collectives({0, 0, 1}, {});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.err().code, error_code::unsupported);
}

}  // namespace
}  // namespace actorserve::testing
