// The one-token down projection fused with the weighted combine (moe_kernels.hpp): each slot's
// dot product of one output column is one warp's, computed exactly as expert_gemv computes it,
// and the column's slots are added weighted in ascending expert order exactly as moe_combine adds
// them, so the fp32 y between the two kernels never goes to memory and the result is the same
// bits. A block takes the slots of kWarps / min(top_k, kWarps) columns, a warp each (a warp takes
// every min(top_k, kWarps)-th slot of its column past kWarps slots).

#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 8;      ///< warps a block at most
constexpr int kMinBlocks = 4;  ///< at most 64 registers: 32 warps an SM keep their loads in flight

/// Warps a column takes: one a slot, at most kWarps.
__host__ __device__ inline int warps_per_column(int top_k) { return top_k < kWarps ? top_k : kWarps; }

/// Grid (ceil(hidden / columns), n) of columns * warps_per_column(top_k) warps, columns =
/// kWarps / warps_per_column(top_k).
template <class T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) down_combine_kernel(moe_down_combine_args a) {
  __shared__ int32_t ex[moe_max_top_k], pair[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  __shared__ float dots[kWarps][moe_max_top_k];  ///< [column of the block][slot]
  pdl_begin();
  const int t = blockIdx.y, K = a.top_k, per_column = warps_per_column(K), columns = kWarps / per_column;
  if (threadIdx.x == 0) {  // the slots by ascending expert, as moe_combine sorts them
    const auto pair_of = [&](int j) { return t * K + j; };
    sort_slots_by_expert(a.experts + size_t(t) * K, a.weights + size_t(t) * K, K, pair_of, ex, pair, weight);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = warp / per_column, c = blockIdx.x * columns + col;
  const T* act = static_cast<const T*>(a.act);
  const T* w = static_cast<const T*>(a.w);
  if (c < a.hidden) {
    for (int j = warp % per_column; j < K; j += per_column) {
      const T* const xs[1] = {act + size_t(pair[j]) * a.k};
      const T* const ws[1] = {w + (size_t(ex[j]) * a.hidden + c) * a.k};
      float acc[1] = {0.0f};
      lane_dots<T, 1, 1>(xs, ws, a.k, lane, acc);
      const float d = warp_sum(acc[0]);
      if (lane == 0) dots[col][j] = d;
    }
  }
  __syncthreads();
  if (c >= a.hidden || warp % per_column != 0 || lane != 0) return;
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) sum += weight[j] * dots[col][j];
  float* out = a.out + size_t(t) * a.hidden + c;
  *out = a.accumulate ? *out + sum : sum;
}

}  // namespace

int moe_down_combine(act_dtype dt, const moe_down_combine_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.top_k < 1 || a.top_k > moe_max_top_k || a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const int per_column = warps_per_column(a.top_k), columns = kWarps / per_column;
  const dim3 grid((a.hidden + columns - 1) / columns, a.n);
  cudaError_t e = cudaSuccess;
  AS_DISPATCH_ACT(dt, e = launch_pdl(down_combine_kernel<T>, grid, dim3(columns * per_column * 32), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
