#pragma once
// Device helpers shared by the .cu files: element conversions, block reductions and the
// last-CTA count (counted_last).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/programmatic_launch.hpp"

namespace actorserve::gpu::cuda::dev {

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

/// SiLU(g) * u rounded to T: SwiGLU's one formula, for every kernel that applies it (silu_and_mul,
/// the fused gate/up GEMVs, the experts' kernels), so they agree bit for bit on the same g and u.
template <class T>
__device__ __forceinline__ T silu_mul(float g, float u) {
  return from_f32<T>(g / (1.0f + expf(-g)) * u);
}

/// Eight 16-bit elements (one 16-byte load) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* p, float* out) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

/// Called by every thread of a CTA once it has stored what another CTA reads: counts the CTA on
/// `counter`; true in the CTA that counts the `expected`-th, which sets the counter back to 0
/// (the next launch or graph replay needs no memset) and then sees every counted CTA's stores.
__device__ __forceinline__ bool counted_last(int32_t* counter, int expected) {
  __shared__ bool last;
  __threadfence();  // this CTA's stores are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == expected - 1;
    if (last) *counter = 0;  // every CTA has counted
  }
  __syncthreads();
  if (last) __threadfence();  // the other CTAs' stores are read after their counts
  return last;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block; `scratch` holds 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

/// The GPU's global timer in ns (the same clock on every SM: timelines across CTAs).
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Programmatic dependent launch (compute capability 9.0 on): lets the next kernel start
/// launching. Compiled to nothing for older targets, where launch_pdl_smem launches plainly.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
/// Waits until the previous kernel has finished and its writes are visible (returns at once when
/// not launched as a programmatic dependent; nothing for targets below sm_90).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// First statement of a kernel launched by launch_pdl: lets the next kernel start launching, then
/// waits until the previous one has finished and its writes are visible (no-ops without PDL).
__device__ __forceinline__ void pdl_begin() {
  pdl_launch_dependents();
  pdl_wait();
}

/// Launches `kernel` with `smem` bytes of dynamic shared memory on `s`, as a programmatic
/// dependent of the previous kernel when programmatic_launch() is on (set_programmatic_launch:
/// off on a device below compute capability 9.0); the kernel must start
/// with pdl_begin() (or wait before it reads or writes anything the previous kernels touch).
/// Returns the launch's cudaError_t.
template <class... P, class... A>
cudaError_t launch_pdl_smem(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic_launch() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/// launch_pdl_smem without dynamic shared memory.
template <class... P, class... A>
cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t s, A... args) {
  return launch_pdl_smem(kernel, grid, block, 0, s, args...);
}

/// Launches with dt dispatched to the element type T (__nv_bfloat16 or __half).
#define AS_DISPATCH_ACT(dt, ...)                  \
  do {                                            \
    if ((dt) == act_dtype::bf16) {                \
      using T = __nv_bfloat16;                    \
      __VA_ARGS__;                                \
    } else {                                      \
      using T = __half;                           \
      __VA_ARGS__;                                \
    }                                             \
  } while (0)

}  // namespace actorserve::gpu::cuda::dev
