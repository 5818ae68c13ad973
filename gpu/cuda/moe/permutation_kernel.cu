// The token -> expert permutation on the device (moe_kernels.hpp): one block counts the pairs of
// each expert, scans the counts into row and tile offsets, and one warp places the pairs in
// order (their experts staged in shared memory by the block), so that within an expert they stay
// in ascending (token, slot) order.
#include <algorithm>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kThreads = 1024;

/// One block; dynamic shared memory 2 * num_experts ints (counts, then each expert's cursor).
__global__ void __launch_bounds__(kThreads) permute_kernel(moe_permute_args a) {
  extern __shared__ int32_t counts[];
  int32_t* cursor = counts + a.num_experts;
  pdl_begin();
  const int E = a.num_experts, P = a.num_pairs, tile_rows = moe_tile_rows(a.tile);
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) atomicAdd(&counts[a.experts[p]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {  // exclusive scans of rows and tiles, 32 experts a round
    const int ln = threadIdx.x;
    int32_t rows = 0, tiles = 0;  // the totals of the rounds before, in every lane
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + ln;
      const int32_t c = e < E ? counts[e] : 0, t = (c + tile_rows - 1) / tile_rows;
      int32_t rc = c, tc = t;  // inclusive scans over the round's lanes
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t ro = __shfl_up_sync(0xffffffffu, rc, o), to = __shfl_up_sync(0xffffffffu, tc, o);
        if (ln >= o) rc += ro, tc += to;
      }
      if (e < E) {
        a.offsets[e] = cursor[e] = rows + rc - c;
        a.tile_offsets[e] = tiles + tc - t;
      }
      rows += __shfl_sync(0xffffffffu, rc, 31);
      tiles += __shfl_sync(0xffffffffu, tc, 31);
    }
    if (ln == 0) {
      a.offsets[E] = rows;
      a.tile_offsets[E] = tiles;
    }
  }
  __syncthreads();
  // kThreads pairs at a time: the block stages their experts in shared memory (one coalesced
  // load), then one warp places them 32 at a time, lanes of one expert taking consecutive rows
  // in lane (= pair) order, with no global load on its serial path.
  __shared__ int32_t chunk[kThreads];
  const int lane = threadIdx.x & 31;
  const unsigned lower = (1u << lane) - 1u;
  for (int base = 0; base < P; base += kThreads) {
    chunk[threadIdx.x] = base + int(threadIdx.x) < P ? a.experts[base + threadIdx.x] : -1;
    __syncthreads();
    if (threadIdx.x < 32) {
      for (int sub = 0; sub < kThreads && base + sub < P; sub += 32) {
        const int p = base + sub + lane;
        const int e = chunk[sub + lane];  // -1 past the last pair
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (p < P) {
          const int row = cursor[e] + __popc(peers & lower);
          a.sorted_pairs[row] = p;
          a.pair_rows[p] = row;
        }
        __syncwarp();
        if (p < P && (peers & lower) == 0) cursor[e] += __popc(peers);
        __syncwarp();
      }
    }
    __syncthreads();  // the chunk is rewritten next round
  }
}

}  // namespace

int moe_permute(const moe_permute_args& a, cudaStream_t s) {
  if (a.num_experts <= 0) return int(cudaErrorInvalidValue);
  const size_t smem = size_t(2) * a.num_experts * sizeof(int32_t);
  return int(launch_pdl_smem(permute_kernel, dim3(1), dim3(kThreads), smem, s, a));
}

int moe_max_tiles(int num_pairs, int num_experts, moe_gemm_tile tile) {
  // Each expert's last tile may be partial; every tile holds at least one row.
  const int rows = moe_tile_rows(tile);
  return std::min(num_pairs, (num_pairs + rows - 1) / rows + num_experts);
}

}  // namespace actorserve::gpu::cuda
