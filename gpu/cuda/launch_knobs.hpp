#pragma once
// Host helpers of the kernel launchers: environment knobs (for measuring variants without a
// rebuild) and the current device's SM count (for grids of a fixed number of waves).
#include <cuda_runtime_api.h>

#include <cstdlib>

namespace actorserve::gpu::cuda {

/// An integer knob from the environment, else `fallback`.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

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
