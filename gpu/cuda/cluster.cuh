#pragma once
// Thread-block cluster primitives (compute capability 9.0 on): the cluster-wide barrier and loads
// from another CTA's shared memory (distributed shared memory). Below sm_90 they trap: the host
// launches no cluster kernel there (tuning.hpp, runs_tma).
#include <cstdint>

namespace actorserve::gpu::cuda::dev {

/// Every thread of every CTA of the cluster arrives, then waits for all: the shared-memory writes
/// before it (release) are visible to the reads after it in any CTA of the cluster (acquire).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// The cluster's address of this CTA's shared-memory `p` in the CTA of cluster rank `rank`.
__device__ __forceinline__ uint32_t cluster_smem_addr(const void* p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t out;
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(local), "r"(rank));
  return out;
#else
  __trap();
  return 0;
#endif
}

/// One float / four floats (16-byte aligned) at a cluster shared-memory address (cluster_smem_addr).
__device__ __forceinline__ float ld_cluster(uint32_t addr) {
  float x = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(x) : "r"(addr));
#else
  __trap();
#endif
  return x;
}
__device__ __forceinline__ float4 ld_cluster4(uint32_t addr) {
  float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
               : "r"(addr));
#else
  __trap();
#endif
  return x;
}

}  // namespace actorserve::gpu::cuda::dev
