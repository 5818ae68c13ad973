// The device fill of --load-format dummy: each thread hashes (seed, tensor id, element index)
// with the host's function, so the CPU and CUDA executors hold the same weights.
#include <algorithm>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/model/dummy_fill.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

__device__ __forceinline__ float dummy_value(const dummy_fill& f, size_t i) {
  return dummy_bf16_to_f32(dummy_bf16_bits(f.seed, f.tensor_id, f.first + i, f.ones));
}

template <class T>
__global__ void fill_dummy_kernel(dummy_fill f, T* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<T>(dummy_value(f, i));
}

__global__ void fill_dummy_f32_kernel(dummy_fill f, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = dummy_value(f, i);
}

/// A grid-stride loop's blocks: enough to fill the GPU, at most one per 256 elements.
unsigned blocks_for(size_t n) { return static_cast<unsigned>(std::clamp<size_t>((n + 255) / 256, 1, 65536)); }

}  // namespace

int fill_dummy_act(const dummy_fill& f, act_dtype dt, void* dst, size_t n, cudaStream_t s) {
  if (n == 0) return 0;
  AS_DISPATCH_ACT(dt, fill_dummy_kernel<T><<<blocks_for(n), 256, 0, s>>>(f, static_cast<T*>(dst), n));
  return cudaGetLastError();
}

int fill_dummy_f32_device(const dummy_fill& f, float* dst, size_t n, cudaStream_t s) {
  if (n == 0) return 0;
  fill_dummy_f32_kernel<<<blocks_for(n), 256, 0, s>>>(f, dst, n);
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
