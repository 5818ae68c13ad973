// The one-shot all-reduce (and all-gather) over peer pointers: one_shot_kernel.hpp says what it
// does; the comments below say how the barriers order the buffers' reads and writes.
#include <cuda_runtime.h>

#include "gpu/cuda/parallel/one_shot_kernel.hpp"

namespace actorserve::gpu::cuda::one_shot {

namespace {

/// How many spins pass between looks at the host-mapped abort word and the clock (a read of host
/// memory costs about a microsecond; the flags are read in every spin).
constexpr uint32_t spins_per_look = 64;

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Spins until *flag == epoch. False when the group is aborted, or when the wait outlasts
/// timeout_ns: then it marks the group timed out and aborted, so every other spin ends too
/// instead of waiting out its own bound.
__device__ bool wait_flag(const uint32_t* flag, uint32_t epoch, control_block* control, uint64_t timeout_ns) {
  volatile control_block* c = control;
  uint64_t since = 0;
  for (uint32_t i = 0;; ++i) {
    if (load_acquire_sys(flag) == epoch) return true;
    if (i % spins_per_look != 0) continue;
    if (c->abort != 0) return false;
    const uint64_t now = global_ns();
    if (i == 0) {
      since = now;
    } else if (now - since > timeout_ns) {
      c->timed_out = 1;
      __threadfence_system();  // seen before abort: a host that sees the abort sees why
      c->abort = 1;
      __threadfence_system();
      return false;
    }
  }
}

/// Block b of this rank meets block b of every rank: thread r (< num_ranks) tells rank r that
/// this block has reached the barrier (its flag in rank r's signals) and waits for rank r's flag
/// in its own. NOTE: the __syncthreads before the call orders every thread's earlier accesses
/// before thread r's release; the acquire and the __syncthreads inside order the peer's earlier
/// accesses before every thread's later ones (the release is cumulative, as in vLLM's barrier).
/// Every thread returns the same answer (false: aborted or timed out).
__device__ bool meet(const params& p, bool at_end, uint32_t epoch, int* failed) {
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < p.num_ranks) {
    signal_block* theirs = p.signals[peer];
    signal_block* mine = p.signals[p.rank];
    uint32_t* tell = at_end ? &theirs->end[blockIdx.x][p.rank] : &theirs->start[blockIdx.x][p.rank];
    const uint32_t* hear = at_end ? &mine->end[blockIdx.x][peer] : &mine->start[blockIdx.x][peer];
    store_release_sys(tell, epoch);
    if (!wait_flag(hear, epoch, p.control, p.timeout_ns)) *failed = 1;
  }
  __syncthreads();
  return *failed == 0;
}

/// Elements 4v..4v+3 of x[n] (zeros past n).
__device__ __forceinline__ float4 load4(const float* x, size_t v, size_t n, bool aligned) {
  const size_t i = 4 * v;
  if (aligned && i + 3 < n) return reinterpret_cast<const float4*>(x)[v];
  return make_float4(x[i], i + 1 < n ? x[i + 1] : 0.0f, i + 2 < n ? x[i + 2] : 0.0f, i + 3 < n ? x[i + 3] : 0.0f);
}

__device__ __forceinline__ void store4(float* x, size_t v, size_t n, bool aligned, float4 s) {
  const size_t i = 4 * v;
  if (aligned && i + 3 < n) {
    reinterpret_cast<float4*>(x)[v] = s;
    return;
  }
  x[i] = s.x;
  if (i + 1 < n) x[i + 1] = s.y;
  if (i + 2 < n) x[i + 2] = s.z;
  if (i + 3 < n) x[i + 3] = s.w;
}

__device__ __forceinline__ bool aligned16(const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15) == 0; }

/// Rank r's buffer, 4 floats at a time, read from L2 (peer memory written during this kernel).
__device__ __forceinline__ float4 peer4(const params& p, int r, size_t v) {
  return __ldcg(reinterpret_cast<const float4*>(p.buffers[r]) + v);
}

// NOTE: element group v (floats 4v..4v+3) belongs to block (v / block_threads) % gridDim.x on
// every rank, in the copy and in the read alike, and every rank launches the same grid for one
// call: so block b reads only what block b of each rank wrote before their first meeting, and
// once block b of each rank has met the others at the end, no rank reads its groups any more. A
// rank's next launch starts after all its blocks have met at the end, hence after every rank
// stopped reading its buffer: the buffer is free to overwrite.
__global__ void __launch_bounds__(block_threads) one_shot_kernel(const params p) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  const uint32_t epoch = p.signals[p.rank]->epoch[blockIdx.x] + 1;
  const size_t groups = (p.n + 3) / 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;

  float4* mine = reinterpret_cast<float4*>(p.buffers[p.rank]);
  const bool in_aligned = aligned16(p.in);
  for (size_t v = first; v < groups; v += stride) mine[v] = load4(p.in, v, p.n, in_aligned);
  __syncthreads();
  if (!meet(p, false, epoch, &failed)) return;

  if (p.kind == op::reduce_sum) {
    const bool out_aligned = aligned16(p.out);
    for (size_t v = first; v < groups; v += stride) {
      // Rank order, the same on every rank: every rank's sum is bitwise the same.
      float4 s = peer4(p, 0, v);
#pragma unroll
      for (int r = 1; r < max_ranks; ++r) {
        if (r >= p.num_ranks) break;
        const float4 x = peer4(p, r, v);
        s.x += x.x;
        s.y += x.y;
        s.z += x.z;
        s.w += x.w;
      }
      store4(p.out, v, p.n, out_aligned, s);
    }
  } else {
#pragma unroll
    for (int r = 0; r < max_ranks; ++r) {
      if (r >= p.num_ranks) break;
      float* row = p.out + size_t(r) * p.n;
      const bool row_aligned = aligned16(row);
      for (size_t v = first; v < groups; v += stride) store4(row, v, p.n, row_aligned, peer4(p, r, v));
    }
  }
  __syncthreads();
  if (!meet(p, true, epoch, &failed)) return;
  if (threadIdx.x == 0) p.signals[p.rank]->epoch[blockIdx.x] = epoch;
}

}  // namespace

int launch(const params& p, int blocks, cudaStream_t stream) {
  one_shot_kernel<<<blocks, block_threads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace actorserve::gpu::cuda::one_shot
