#pragma once
// mbarrier and bulk-copy primitives of sm_90 (PTX), shared by the kernels that fill
// shared-memory rings asynchronously: the Hopper attention kernels (attention/) and the
// bulk-copy one-token GEMVs (gemv_bulk_kernel.cu). Barrier and shared-memory operands are
// shared-state-space addresses (__cvta_generic_to_shared of a pointer).
#include <cstdint>

namespace actorserve::gpu::cuda::dev {

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// The barrier's arrival once all of this thread's earlier cp.async copies have landed (the
/// barrier's count includes it: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Makes barrier initialisations visible to the asynchronous proxy (the TMA unit) as well.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// Arrives at the barrier and adds `bytes` to the copy bytes its current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/// TMA: copies the box at element column `col`, row `row` of the tensor that `map` (a
/// __grid_constant__ CUtensorMap) describes into shared memory at `dst` (1024-byte aligned for
/// the 128-byte swizzle); the bytes count towards `bar`'s phase.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}
/// Brings a tensor map (a __grid_constant__ CUtensorMap parameter) into the cache the copy
/// engine reads descriptors from, ahead of its first tma_load_2d.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
/// Blocks until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace actorserve::gpu::cuda::dev
