// One-token GEMVs streaming their weights through the bulk-copy engine into a shared-memory ring
// (gemv_bulk.hpp). Block = 128 consumer threads + one producer warp (of which one thread works).
// Stage i of the block's work is slice i % slices of group g: chunks [c0, c0 + kSlice) of each
// of the group's kRows rows, kSlice = 128 * (kLoadsInFlight / kRows) 16-byte chunks (16 KiB a
// stage). Consumer thread t takes chunks c0 + t + 128 u of it, u ascending: over the slices, the
// chunks t, t + 128, ... in order, as gemv_kernel.cu's accumulate gives thread t, with the same
// fmas, warp sums and sum over the 4 warps (fixed order: the same results).
#include <atomic>
#include <cstdint>

#include "gpu/cuda/linear/gemv_bulk.hpp"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_epilogue.cuh"
#include "gpu/cuda/sm_count.hpp"
#include "gpu/cuda/mbarrier.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#pragma nv_diag_suppress 177  // the copy functions only the sm_90 kernel body uses
#endif

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;

constexpr int kBlockThreads = kThreads + 32;  // consumers, then the producer warp
constexpr int kStageBytes = kLoadsInFlight * kThreads * 16;
constexpr int kMaxStages = 13;                // 13 x 16 KiB + barriers fit the 227 KiB a block may have

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

/// `bytes` (a multiple of 16) from global `src` to shared `dst`, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

/// The same, the lines kept in L2 marked first to evict (the weights are read once a step).
__device__ __forceinline__ void bulk_copy_evict_first(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                      uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/// Waits for the 128 consumer threads (named barrier 1; the producer warp does not take part).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"r"(kThreads) : "memory"); }

/// The shared memory of a block: the ring, a full and an empty barrier per stage, and two sets of
/// per-warp partial sums (groups alternate between them, so one barrier per group suffices).
template <int kRows>
struct bulk_smem {
  uint4* ring;
  uint64_t *full, *empty;
  partials<1, kRows>* red;
  __device__ __forceinline__ bulk_smem(uint4* base, int stages) {
    ring = base;
    full = reinterpret_cast<uint64_t*>(base + size_t(stages) * (kStageBytes / 16));
    empty = full + stages;
    red = reinterpret_cast<partials<1, kRows>*>(empty + stages);
  }
};

template <int kRows>
size_t bulk_smem_bytes(int stages) {
  return size_t(stages) * kStageBytes + size_t(stages) * 2 * sizeof(uint64_t) + 2 * sizeof(partials<1, kRows>);
}

/// The producer: for each of the block's (group, slice) stages in order, waits until the
/// consumers have released the ring slot, then copies the slice of each row into it. The first
/// `stages` copies go out at once, before the previous kernel has finished.
template <class T, int kRows, class Epi>
__device__ __forceinline__ void produce(const bulk_smem<kRows>& sm, const T* w, int k, const Epi& epi, int stages,
                                        bool evict_first) {
  constexpr int kSlice = kStageBytes / 16 / kRows;
  const uint64_t policy = evict_first ? evict_first_policy() : 0;
  const int chunks = k / 8, slices = (chunks + kSlice - 1) / kSlice, groups = epi.groups();
  int slot = 0;
  uint32_t phase = 0;  // of the ring's current pass: the consumers' release of pass p - 1 ends phase p - 1
  bool first_pass = true;
  for (int g = blockIdx.x; g < groups; g += gridDim.x) {
    const T* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = w + size_t(epi.row(g, r)) * k;
    for (int sl = 0; sl < slices; ++sl) {
      if (!first_pass) mbar_wait(smem_u32(sm.empty + slot), phase ^ 1);
      const int c0 = sl * kSlice, len = min(kSlice, chunks - c0);
      const uint32_t bytes = uint32_t(len) * 16;
      mbar_arrive_expect_tx(smem_u32(sm.full + slot), bytes * kRows);
      uint4* dst = sm.ring + size_t(slot) * (kStageBytes / 16);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (evict_first)
          bulk_copy_evict_first(dst + r * kSlice, rows[r] + size_t(c0) * 8, bytes, sm.full + slot, policy);
        else
          bulk_copy(dst + r * kSlice, rows[r] + size_t(c0) * 8, bytes, sm.full + slot);
      }
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
        first_pass = false;
      }
    }
  }
}

/// The bulk-copy engine and mbarrier transaction counts need sm_90: for older targets the kernel
/// traps, and the host selects it only on compute capability 9.x (cuda_tuning_for).
template <class T, int kRows, class Epi>
__global__ void __launch_bounds__(kBlockThreads, 1) gemv_bulk_kernel(const T* x, int k, const T* w, Epi epi,
                                                                      int stages, bool evict_first) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  constexpr int kUnroll = kLoadsInFlight / kRows, kSlice = kUnroll * kThreads;
  extern __shared__ uint4 smem[];
  const bulk_smem<kRows> sm(smem, stages);
  launch_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(smem_u32(sm.full + s), 1);
      mbar_init(smem_u32(sm.empty + s), kThreads);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= kThreads) {  // the producer warp: weights only, no wait for the previous grid
    if (threadIdx.x == kThreads) produce<T, kRows>(sm, w, k, epi, stages, evict_first);
    return;
  }
  const int tid = threadIdx.x, chunks = k / 8, slices = (chunks + kSlice - 1) / kSlice, groups = epi.groups();
  const uint4* const xv = reinterpret_cast<const uint4*>(x);
  wait_for_previous_grid();  // x and the outputs belong to earlier kernels until now
  int slot = 0, buf = 0;
  uint32_t phase = 0;
  for (int g = blockIdx.x; g < groups; g += gridDim.x, buf ^= 1) {
    float acc[kRows][1];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r][0] = 0.0f;
    for (int sl = 0; sl < slices; ++sl) {
      mbar_wait(smem_u32(sm.full + slot), phase);
      const uint4* st = sm.ring + size_t(slot) * (kStageBytes / 16);
      const int c0 = sl * kSlice;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int cl = u * kThreads + tid, c = c0 + cl;
        if (c >= chunks) break;
        uint4 wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[r] = st[r * kSlice + cl];
        fma_chunk<T, kRows>(wv, __ldg(xv + c), acc);
      }
      mbar_arrive(smem_u32(sm.empty + slot));
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
      }
    }
    reduce_warps<1, kRows>(acc, sm.red[buf]);
    consumers_sync();
    epi.template finish<T>(g, sm.red[buf], tid);
  }
#endif
}

template <class T, int kRows, class Epi>
int launch_bulk(const T* x, int k, const T* w, const Epi& epi, int groups, cudaStream_t s,
                const bulk_gemv_tuning& bulk) {
  if (groups <= 0) return 0;
  auto* kernel = gemv_bulk_kernel<T, kRows, Epi>;
  const int stages = bulk.stages < 1 ? 1 : bulk.stages > kMaxStages ? kMaxStages : bulk.stages;
  const size_t smem = bulk_smem_bytes<kRows>(stages);
  static std::atomic<size_t> allowed{48 * 1024};  // per kernel: the dynamic shared memory it may take
  if (smem > allowed.load()) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
      return e;
    allowed.store(smem);
  }
  const int per_sm = bulk.blocks_per_sm < 1 ? 1 : bulk.blocks_per_sm, cap = per_sm * current_sm_count();
  const int grid = groups < cap ? groups : cap;
  return launch_pdl_smem(kernel, dim3(grid), dim3(kBlockThreads), smem, s, x, k, w, epi, stages, bulk.evict_first);
}

}  // namespace

int gemv_bulk(act_dtype dt, const void* x, int k, const void* w, int n, float* y, cudaStream_t s,
              const bulk_gemv_tuning& bulk) {
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                             store_epilogue<4>{y, n}, (n + 3) / 4, s, bulk));
  return rc;
}

int gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s,
                       const bulk_gemv_tuning& bulk) {
  if (a.kv_fp8) return int(cudaErrorNotSupported);  // the epilogue stores 16-bit K/V (rope_kv_write writes E4M3)
  const int pairs = (a.num_heads + 2 * a.num_kv_heads) * (a.head_dim / 2);
  int rc = 0;
  if (bulk.qkv_pairs == 1)
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 2>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               qkv_rope_epilogue<1>{a}, pairs, s, bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               qkv_rope_epilogue<2>{a}, (pairs + 1) / 2, s, bulk));
  return rc;
}

int gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  int rc = 0;
  if (rows_per_block == 2)
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 2>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               gate_up_epilogue<1>{act, inter}, inter, s, bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               gate_up_epilogue<2>{act, inter}, (inter + 1) / 2, s, bulk));
  return rc;
}

}  // namespace actorserve::gpu::cuda
