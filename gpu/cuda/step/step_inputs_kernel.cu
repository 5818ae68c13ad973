// The previous step's sampled tokens into this step's ids (see step_inputs.hpp).
#include <cuda_runtime.h>

#include "gpu/cuda/step/step_inputs.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::gpu::cuda {
namespace {

__global__ void resolve_previous_kernel(int32_t* ids, const sample_out* prev_out, const int32_t* pairs, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ids[pairs[2 * i]] = prev_out[pairs[2 * i + 1]].token;
}

}  // namespace

cudaError_t resolve_previous_tokens(int32_t* ids, const sample_out* prev_out, const int32_t* pairs, int n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int threads = 256;
  resolve_previous_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(ids, prev_out, pairs, n);
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
