// The kernel of e4m3_convert_kernel.hpp: one thread a word of four codes.
#include "e4m3_convert_kernel.hpp"

#include <cuda_runtime.h>

#include "gpu/cuda/attention/fp8_tiles.cuh"

namespace actorserve::testing {
namespace {

template <class T>
__global__ void convert_codes_kernel(uint16_t* out) {
  const uint32_t i = threadIdx.x;
  const uint32_t x = i | ((i + 1) & 255u) << 8 | ((i + 2) & 255u) << 16 | ((i + 3) & 255u) << 24;
  uint32_t even, odd;  // codes i, i + 2 and i + 1, i + 3
  gpu::cuda::attn_dev::e4m3x4_to<T>(x, even, odd);
  out[4 * i] = uint16_t(even);
  out[4 * i + 1] = uint16_t(odd);
  out[4 * i + 2] = uint16_t(even >> 16);
  out[4 * i + 3] = uint16_t(odd >> 16);
}

}  // namespace

int convert_all_e4m3_codes(gpu::cuda::act_dtype dt, uint16_t* out) {
  if (dt == gpu::cuda::act_dtype::bf16)
    convert_codes_kernel<__nv_bfloat16><<<1, 256>>>(out);
  else
    convert_codes_kernel<__half><<<1, 256>>>(out);
  const cudaError_t e = cudaGetLastError();
  return int(e != cudaSuccess ? e : cudaDeviceSynchronize());
}

}  // namespace actorserve::testing
