#pragma once
// The current device's SM count, for kernel launchers whose grids are a fixed number of waves.
#include <cuda_runtime_api.h>

namespace actorserve::gpu::cuda {

/// Multiprocessors of the calling thread's current device (cached per thread; at least 1).
inline int current_sm_count() {
  thread_local int sms = 0;
  if (sms == 0) {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (sms <= 0) sms = 1;
  }
  return sms;
}

}  // namespace actorserve::gpu::cuda
