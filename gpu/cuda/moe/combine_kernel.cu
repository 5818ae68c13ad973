// The weighted combine of a mixture-of-experts FFN (moe_kernels.hpp): each token's expert rows
// summed back in ascending expert order.
#include "gpu/cuda/kernel_util.cuh"
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
  if (threadIdx.x == 0) {  // the slots by ascending expert (an insertion sort of top_k entries)
    int32_t ex[moe_max_top_k];
    for (int j = 0; j < K; ++j) {
      const int32_t e = a.experts[size_t(t) * K + j];
      int i = j;
      for (; i > 0 && ex[i - 1] > e; --i) {
        ex[i] = ex[i - 1];
        row[i] = row[i - 1];
        weight[i] = weight[i - 1];
      }
      ex[i] = e;
      row[i] = a.pair_rows ? a.pair_rows[size_t(t) * K + j] : t * K + j;
      weight[i] = a.weights[size_t(t) * K + j];
    }
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
