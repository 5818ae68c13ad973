// NCCL's collectives (gpu/cuda/parallel/nccl_collective.hpp) and the size-switched group over 2
// GPUs: NCCL refuses two ranks on one GPU, so these skip, saying so, where fewer are visible.
#include <gtest/gtest.h>

#include <memory>

#include "collective_test_util.hpp"
#include "cuda_test_util.hpp"
#include "gpu/cuda/parallel/collective_group.hpp"
#include "gpu/cuda/parallel/nccl_collective.hpp"

namespace actorserve::testing {
namespace {

#define AS_REQUIRE_TWO_GPUS_AND_NCCL(lib)                                                                   \
  if (cuda::device_count() < 2)                                                                             \
    GTEST_SKIP() << "NCCL needs one GPU per rank: 2 GPUs, " << cuda::device_count() << " visible";          \
  auto lib = cuda::load_nccl("");                                                                           \
  if (!lib) GTEST_SKIP() << "NCCL not loadable here: " << lib.err().message

/// Every rank all-reduces (then all-gathers) its part on its GPU; returns [rank] the sums and
/// [rank] the gathered rows.
template <class Ranks>
void reduce_and_gather(Ranks& ranks, const std::vector<std::vector<float>>& parts,
                       std::vector<std::vector<float>>& sums, std::vector<std::vector<float>>& gathered) {
  const int num_ranks = static_cast<int>(parts.size());
  const size_t n = parts[0].size();
  std::vector<std::unique_ptr<rank_resources>> res;
  for (int r = 0; r < num_ranks; ++r) res.push_back(std::make_unique<rank_resources>(r, n * (num_ranks + 2)));
  sums.assign(num_ranks, std::vector<float>(n));
  gathered.assign(num_ranks, std::vector<float>(n * num_ranks));
  std::vector<status> enqueued(num_ranks), gather_enqueued(num_ranks);
  run_ranks(num_ranks, [&](int r) {
    cudaSetDevice(r);
    cudaStream_t s = res[r]->stream;
    float* sum = res[r]->buffer;
    float* part = sum + n;
    float* out = part + n;
    cudaMemcpyAsync(sum, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(part, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
    enqueued[r] = ranks[r]->all_reduce_sum(sum, n, s);
    gather_enqueued[r] = ranks[r]->all_gather(part, n, out, s);
    cudaMemcpyAsync(sums[r].data(), sum, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(gathered[r].data(), out, n * num_ranks * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  });
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_TRUE(enqueued[r].ok()) << enqueued[r].err().message;
    ASSERT_TRUE(gather_enqueued[r].ok()) << gather_enqueued[r].err().message;
    auto err = ranks[r]->async_error();
    EXPECT_TRUE(err.ok()) << err.err().message;
  }
}

TEST(NcclCollective, TwoGpusSumAndGather) {
  AS_REQUIRE_TWO_GPUS_AND_NCCL(lib);
  auto made = cuda::make_nccl_collectives(**lib, {0, 1});
  ASSERT_TRUE(made.ok()) << made.err().message;
  for (size_t n : {size_t(1), size_t(8192), size_t(256 * 8192)}) {
    std::vector<std::vector<float>> parts{random_floats(n, 1), random_floats(n, 2)};
    std::vector<std::vector<float>> sums, gathered;
    reduce_and_gather(*made, parts, sums, gathered);
    // Two addends: a + b == b + a, so any reduction order gives these bits.
    const auto want = rank_order_sum(parts);
    std::vector<float> rows = parts[0];
    rows.insert(rows.end(), parts[1].begin(), parts[1].end());
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(count_unequal(sums[r], want), 0) << "n " << n << " rank " << r;
      EXPECT_EQ(count_unequal(gathered[r], rows), 0) << "n " << n << " rank " << r;
    }
  }
}

TEST(NcclCollective, TwoRanksOnOneGpuAreRefused) {
  AS_REQUIRE_CUDA();
  auto lib = cuda::load_nccl("");
  if (!lib) GTEST_SKIP() << "NCCL not loadable here: " << lib.err().message;
  auto made = cuda::make_nccl_collectives(**lib, {0, 0});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.err().code, error_code::unsupported);
}

TEST(NcclCollective, AbortEndsEveryRankAndLaterCallsAreRefused) {
  AS_REQUIRE_TWO_GPUS_AND_NCCL(lib);
  auto made = cuda::make_nccl_collectives(**lib, {0, 1});
  ASSERT_TRUE(made.ok()) << made.err().message;
  auto& ranks = *made;
  ranks[0]->abort();
  for (auto& rank : ranks) {
    EXPECT_FALSE(rank->async_error().ok());
    rank_resources res(rank->rank(), 16);
    cudaSetDevice(rank->rank());
    EXPECT_EQ(rank->all_reduce_sum(res.buffer, 16, res.stream).err().code, error_code::cancelled);
  }
}

TEST(DeviceCollectives, TwoGpusSwitchBetweenOneShotAndNcclBySize) {
  AS_REQUIRE_TWO_GPUS_AND_NCCL(lib);
  auto made = cuda::make_device_collectives({0, 1}, {});
  ASSERT_TRUE(made.ok()) << made.err().message;
  // Below the threshold (one-shot where peer access works) and above it (NCCL).
  for (size_t n : {size_t(8192), cuda::one_shot_threshold_bytes / sizeof(float) * 2}) {
    std::vector<std::vector<float>> parts{random_floats(n, 3), random_floats(n, 4)};
    std::vector<std::vector<float>> sums, gathered;
    reduce_and_gather(*made, parts, sums, gathered);
    const auto want = rank_order_sum(parts);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(count_unequal(sums[r], want), 0) << "n " << n << " rank " << r;
  }
}

}  // namespace
}  // namespace actorserve::testing
