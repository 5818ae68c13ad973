// The weighted combine of a mixture-of-experts FFN (moe_kernels.hpp): each token's expert rows
// summed back in ascending expert order.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kThreads = 256;

/// Grid (n): one block per token.
__global__ void __launch_bounds__(kThreads) combine_kernel(moe_combine_args a) {
  __shared__ int32_t row[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  pdl_begin();
  const int t = blockIdx.x, K = a.top_k;
  if (threadIdx.x == 0) {  // the slots by ascending expert
    int32_t ex[moe_max_top_k];
    const auto row_of = [&](int j) { return a.pair_rows ? a.pair_rows[size_t(t) * K + j] : t * K + j; };
    sort_slots_by_expert(a.experts + size_t(t) * K, a.weights + size_t(t) * K, K, row_of, ex, row, weight);
  }
  __syncthreads();
  float* out = a.out + size_t(t) * a.hidden;
  for (int c = threadIdx.x; c < a.hidden; c += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) acc += weight[j] * a.y[size_t(row[j]) * a.hidden + c];
    out[c] = a.accumulate ? out[c] + acc : acc;
  }
}

}  // namespace

int moe_combine(const moe_combine_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.top_k < 1 || a.top_k > moe_max_top_k) return int(cudaErrorInvalidValue);
  return int(launch_pdl(combine_kernel, dim3(a.n), dim3(kThreads), s, a));
}

}  // namespace actorserve::gpu::cuda
