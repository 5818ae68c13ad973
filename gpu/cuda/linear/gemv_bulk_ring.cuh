#pragma once
// The shared-memory ring of the bulk-copy one-token GEMVs (gemv_bulk_kernel.cu for 16-bit
// weights, fp8_gemv_bulk_kernel.cu and fp8_gemv_mma_kernel.cu for E4M3 weights; gemv_bulk.hpp
// describes the scheme). A block is 128 consumer threads and one producer warp, of which one
// thread works. Stage i of a block's work is slice i % slices of its group g: 16-byte chunks
// [c0, c0 + kSlice) of each of the group's kRows weight rows, kSlice = 128 * (kLoadsInFlight /
// kRows) (16 KiB of weights a stage; a ring may leave kPad chunks after each row, so that rows
// read at the same offset fall on different banks). Consumer thread t of the CUDA-core GEMVs
// takes chunks c0 + t + 128 u of a stage, u ascending: over the slices, the chunks t, t + 128,
// ... in order, as gemv_common.cuh's accumulate gives thread t of a 128-thread block.
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/mbarrier.cuh"
#include "gpu/cuda/sm_count.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda::dev::gemv::bulk {

inline constexpr int kBlockThreads = kThreads + 32;  // consumers, then the producer warp
inline constexpr int kStageBytes = kLoadsInFlight * kThreads * 16;
inline constexpr int kMaxStages = 13;  // 13 x 16 KiB + barriers fit the 227 KiB a block may have

/// 16-byte chunks of one row in a stage of kRows rows.
template <int kRows>
inline constexpr int kSlice = kStageBytes / 16 / kRows;

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

/// One xor step of warp_sum's butterfly for the kN rows v[0..kN) a lane carries, and the steps
/// after it: while kN > 1 the lanes whose bit kO is set carry on with the upper half of the rows
/// (`row`, their first, grows by kN / 2), the others with the lower half, each adding what its
/// partner lane held of the rows it keeps, as the butterfly adds it (own value first).
template <int kN, int kO>
__device__ __forceinline__ void scatter_sum_step(float* v, int lane, int& row) {
  if constexpr (kO > 0) {
    constexpr int kKeep = kN > 1 ? kN / 2 : 1;
    if constexpr (kN > 1) {
      const bool upper = (lane & kO) != 0;
#pragma unroll
      for (int i = 0; i < kKeep; ++i) {
        const float keep = upper ? v[i + kKeep] : v[i], send = upper ? v[i] : v[i + kKeep];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kO);
      }
      if (upper) row += kKeep;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], kO);
    }
    scatter_sum_step<kKeep, kO / 2>(v, lane, row);
  }
}

/// What reduce_warps<1, kRows> stores, the same bits (kRows a power of two, at most 32): each
/// lane's sum of a row is the butterfly's at every step, but a lane carries on with only the
/// rows its partner does not, so a warp shuffles kRows - 1 + log2(32 / kRows) values where
/// reduce_warps shuffles 5 kRows (9 against 40 for 8 rows).
template <int kRows>
__device__ __forceinline__ void reduce_warps_scattered(const float (&acc)[kRows][1], partials<1, kRows>& red) {
  static_assert(kRows >= 1 && kRows <= 32 && (kRows & (kRows - 1)) == 0, "kRows a power of two up to 32");
  const int lane = threadIdx.x & 31, warp = (threadIdx.x % kThreads) >> 5;
  float v[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) v[r] = acc[r][0];
  int row = 0;
  scatter_sum_step<kRows, 16>(v, lane, row);
  if ((lane & (32 / kRows - 1)) == 0) red.v[warp][row] = v[0];  // one lane of those holding the row
}

/// How consume reduces a group's sums over the warps: reduce_warps (the 16-bit GEMVs) or
/// reduce_warps_scattered (the FP8 GEMV); the same stores either way.
struct warp_sums {
  template <int kRows>
  __device__ __forceinline__ void operator()(const float (&acc)[kRows][1], partials<1, kRows>& red) const {
    reduce_warps<1, kRows>(acc, red);
  }
};
struct scattered_warp_sums {
  template <int kRows>
  __device__ __forceinline__ void operator()(const float (&acc)[kRows][1], partials<1, kRows>& red) const {
    reduce_warps_scattered<kRows>(acc, red);
  }
};

/// The shared memory of a block: the ring (kRows rows a stage, each followed by kPad unused
/// chunks), a full and an empty barrier per stage, and two sets of per-warp partial sums of kM
/// activation rows (groups alternate between them, so one barrier per group suffices).
template <int kRows_, int kPad_ = 0, int kM_ = 1>
struct ring_smem {
  static constexpr int kRows = kRows_, kPad = kPad_, kM = kM_;
  static constexpr int kRowStride = kSlice<kRows> + kPad;  ///< chunks from one row of a stage to the next
  static constexpr int kStageChunks = kRows * kRowStride;
  using red_t = partials<kM, kRows>;
  /// Bytes of everything but the stages; the stages a block's 227 KiB hold, and the most it takes.
  static constexpr size_t kFixedBytes = 2 * sizeof(red_t);
  static constexpr int kStagesFit = int((227 * 1024 - kFixedBytes) / (kStageChunks * 16 + 2 * sizeof(uint64_t)));
  static constexpr int kStagesMax = kStagesFit < kMaxStages ? kStagesFit : kMaxStages;
  static size_t bytes(int stages) {
    return size_t(stages) * kStageChunks * 16 + size_t(stages) * 2 * sizeof(uint64_t) + kFixedBytes;
  }
  uint4* ring;
  uint64_t *full, *empty;
  red_t* red;
  __device__ __forceinline__ ring_smem(uint4* base, int stages) {
    ring = base;
    full = reinterpret_cast<uint64_t*>(base + size_t(stages) * kStageChunks);
    empty = full + stages;
    red = reinterpret_cast<red_t*>(empty + stages);
  }
  /// Thread 0 initialises the barriers; every thread of the block waits for it.
  __device__ __forceinline__ void init(int stages) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) {
        mbar_init(smem_u32(full + s), 1);
        mbar_init(smem_u32(empty + s), kThreads);
      }
      fence_mbarrier_init();
    }
    __syncthreads();
  }
};

/// The producer: for each of the block's (group, slice) stages in order, waits until the
/// consumers have released the ring slot, then copies the slice of each row into it. Row r of
/// group g starts at w + epi.row(g, r) * row_bytes and has `chunks` 16-byte chunks. The first
/// `stages` copies go out at once, before the previous kernel has finished.
template <class Ring, class Epi>
__device__ __forceinline__ void produce(const Ring& sm, const void* w, size_t row_bytes, int chunks, const Epi& epi,
                                        int stages, bool evict_first) {
  constexpr int kRows = Ring::kRows, kRowChunks = kSlice<kRows>;
  const uint64_t policy = evict_first ? evict_first_policy() : 0;
  const int slices = (chunks + kRowChunks - 1) / kRowChunks, groups = epi.groups();
  const char* const base = static_cast<const char*>(w);
  int slot = 0;
  uint32_t phase = 0;  // of the ring's current pass: the consumers' release of pass p - 1 ends phase p - 1
  bool first_pass = true;
  for (int g = blockIdx.x; g < groups; g += gridDim.x) {
    const char* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rows[r] = base + size_t(epi.row(g, r)) * row_bytes;
    for (int sl = 0; sl < slices; ++sl) {
      if (!first_pass) mbar_wait(smem_u32(sm.empty + slot), phase ^ 1);
      const int c0 = sl * kRowChunks, len = min(kRowChunks, chunks - c0);
      const uint32_t bytes = uint32_t(len) * 16;
      mbar_arrive_expect_tx(smem_u32(sm.full + slot), bytes * kRows);
      uint4* dst = sm.ring + size_t(slot) * Ring::kStageChunks;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        uint4* row_dst = dst + r * Ring::kRowStride;
        if (evict_first)
          bulk_copy_evict_first(row_dst, rows[r] + size_t(c0) * 16, bytes, sm.full + slot, policy);
        else
          bulk_copy(row_dst, rows[r] + size_t(c0) * 16, bytes, sm.full + slot);
      }
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
        first_pass = false;
      }
    }
  }
}

/// The fp32 sums of a group's kRows rows that the CUDA-core consumers carry, one per row.
template <int kRows>
using row_sums = float[kRows][1];

/// The consumers (threads 0..127), once the previous grid has finished and after_wait() has run
/// (on all of them): for each of the block's groups g, a thread's accumulator acc (an AccOrVoid,
/// value-initialised; void: the fp32 sums acc[r][0] of the kRows rows) starts at 0; each full stage
/// of its slices goes to stage(g, acc, stage's chunks, c0) and is released; then the sums are
/// reduced over the warps (by `reduce`) and epi.finish<T>(g, partial sums, thread) writes the
/// group's outputs.
template <class T, class AccOrVoid = void, class Ring, class Epi, class Stage, class Reduce = warp_sums,
          class Hook = no_hook>
__device__ __forceinline__ void consume(const Ring& sm, int chunks, const Epi& epi, int stages, Stage stage,
                                        Reduce reduce = {}, Hook after_wait = {}) {
  using Acc = std::conditional_t<std::is_void_v<AccOrVoid>, row_sums<Ring::kRows>, AccOrVoid>;
  constexpr int kRowChunks = kSlice<Ring::kRows>;
  wait_for_previous_grid();  // x and the outputs belong to earlier kernels until now
  after_wait();
  const int tid = threadIdx.x, slices = (chunks + kRowChunks - 1) / kRowChunks, groups = epi.groups();
  int slot = 0, buf = 0;
  uint32_t phase = 0;
  for (int g = blockIdx.x; g < groups; g += gridDim.x, buf ^= 1) {
    Acc acc{};
    for (int sl = 0; sl < slices; ++sl) {
      mbar_wait(smem_u32(sm.full + slot), phase);
      stage(g, acc, sm.ring + size_t(slot) * Ring::kStageChunks, sl * kRowChunks);
      mbar_arrive(smem_u32(sm.empty + slot));
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
      }
    }
    reduce(acc, sm.red[buf]);
    consumers_sync();
    epi.template finish<T>(g, sm.red[buf], tid);
  }
}

/// Launches `kernel` (a ring kernel on a Ring, taking its stage count and evict-first flag after
/// `args`) for `groups` groups on the grid of `bulk`: at most bulk.blocks_per_sm blocks an SM, 1 to
/// Ring::kStagesMax stages. `allowed` is the kernel's own record of the dynamic shared memory it
/// may take (raised on first need).
template <class Ring, class... P, class... A>
int launch_ring(void (*kernel)(P...), std::atomic<size_t>& allowed, int groups, cudaStream_t s,
                const bulk_gemv_tuning& bulk, A... args) {
  if (groups <= 0) return 0;
  const int stages = bulk.stages < 1 ? 1 : bulk.stages > Ring::kStagesMax ? Ring::kStagesMax : bulk.stages;
  const size_t smem = Ring::bytes(stages);
  if (smem > allowed.load()) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
      return e;
    allowed.store(smem);
  }
  const int per_sm = bulk.blocks_per_sm < 1 ? 1 : bulk.blocks_per_sm, cap = per_sm * current_sm_count();
  const int grid = groups < cap ? groups : cap;
  return launch_pdl_smem(kernel, dim3(grid), dim3(kBlockThreads), smem, s, args..., stages, bulk.evict_first);
}

}  // namespace actorserve::gpu::cuda::dev::gemv::bulk
