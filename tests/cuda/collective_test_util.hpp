#pragma once
// What the collective tests share: one thread per rank (the ranks of a group are threads of one
// process), each with its own non-blocking stream, and the host's rank-order sums.
// NOTE: the streams are non-blocking and the copies are async on them: a copy on the legacy
// default stream (cudaMemcpy) waits for every rank's work on the device, including a kernel
// waiting at a barrier for the very rank that copies: a deadlock.
#include <cuda_runtime.h>

#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace actorserve::testing {

/// Runs fn(rank) on one thread per rank and joins them.
inline void run_ranks(int num_ranks, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < num_ranks; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

/// n floats uniform in [-1, 1], different per seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = ud(rng);
  return v;
}

/// parts[0][i] + parts[1][i] + ... in rank order, in fp32: the one-shot kernel's exact result.
inline std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& parts) {
  std::vector<float> sum = parts[0];
  for (size_t r = 1; r < parts.size(); ++r)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += parts[r][i];
  return sum;
}

/// One rank's stream (non-blocking) and device buffer of `floats` floats, made before the rank
/// threads start and freed after they end (cudaFree synchronises the whole device).
struct rank_resources {
  cudaStream_t stream = nullptr;
  float* buffer = nullptr;
  rank_resources(int device, size_t floats) {
    cudaSetDevice(device);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMalloc(&buffer, (floats + 4) * sizeof(float));
  }
  ~rank_resources() {
    if (stream) cudaStreamDestroy(stream);
    if (buffer) cudaFree(buffer);
  }
  rank_resources(const rank_resources&) = delete;
  rank_resources& operator=(const rank_resources&) = delete;
};

}  // namespace actorserve::testing
