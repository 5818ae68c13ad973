#pragma once
// Device helpers of the expert kernels.
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda::dev {

/// Stores an fp32 result as the output's type: rounded to T, or as it is.
template <class T>
__device__ __forceinline__ void store_out(T* y, float v) { *y = from_f32<T>(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

}  // namespace actorserve::gpu::cuda::dev
