#include "gpu/cuda/device_info.hpp"

#include <cuda_runtime.h>

namespace actorserve::gpu::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

device_properties properties(int device) {
  cudaDeviceProp p{};
  device_properties out;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return out;
  out.name = p.name;
  out.sm_major = p.major;
  out.sm_minor = p.minor;
  out.num_sms = p.multiProcessorCount;
  out.total_memory = p.totalGlobalMem;
  return out;
}

}  // namespace actorserve::gpu::cuda
