// The one-token down projection fused with the weighted combine (moe_kernels.hpp): a warp takes R
// output columns of one token and, slot by slot in ascending expert order, computes each slot's
// dot products exactly as expert_gemv does and adds them weighted exactly as moe_combine does,
// so the fp32 y between the two kernels never goes to memory and the result is the same bits.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 4, R = 2;  ///< 256 CTAs per token at hidden 2048: every SM streams weights
constexpr int kCols = kWarps * R;
constexpr int kMinBlocks = 6;  ///< at most 80 registers (64 spill): 24 warps an SM keep their loads in flight

/// Grid (ceil(hidden / kCols), n).
template <class T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) down_combine_kernel(moe_down_combine_args a) {
  __shared__ int32_t ex[moe_max_top_k], pair[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  pdl_begin();
  const int t = blockIdx.y, K = a.top_k;
  if (threadIdx.x == 0) {  // the slots by ascending expert, as moe_combine sorts them
    for (int j = 0; j < K; ++j) {
      const int32_t e = a.experts[size_t(t) * K + j];
      int i = j;
      for (; i > 0 && ex[i - 1] > e; --i) {
        ex[i] = ex[i - 1];
        pair[i] = pair[i - 1];
        weight[i] = weight[i - 1];
      }
      ex[i] = e;
      pair[i] = t * K + j;
      weight[i] = a.weights[size_t(t) * K + j];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, c0 = blockIdx.x * kCols + (threadIdx.x >> 5) * R;
  if (c0 >= a.hidden) return;
  const int cols = min(R, a.hidden - c0);  // warp-uniform
  float sum[R] = {};
  for (int j = 0; j < K; ++j) {
    const T* x = static_cast<const T*>(a.act) + size_t(pair[j]) * a.k;
    const T* base = static_cast<const T*>(a.w) + (size_t(ex[j]) * a.hidden + c0) * a.k;
    const T* w[R];  // a column past hidden reads column c0 again, its sum never stored
#pragma unroll
    for (int r = 0; r < R; ++r) w[r] = base + size_t(r < cols ? r : 0) * a.k;
    float acc[R] = {};
    lane_dots<T, R>(x, w, a.k, lane, acc);
#pragma unroll
    for (int r = 0; r < R; ++r) sum[r] += weight[j] * warp_sum(acc[r]);
  }
  if (lane != 0) return;
  float* out = a.out + size_t(t) * a.hidden + c0;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < cols) out[r] = a.accumulate ? out[r] + sum[r] : sum[r];
}

}  // namespace

int moe_down_combine(act_dtype dt, const moe_down_combine_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.top_k < 1 || a.top_k > moe_max_top_k || a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const dim3 grid((a.hidden + kCols - 1) / kCols, a.n);
  cudaError_t e = cudaSuccess;
  AS_DISPATCH_ACT(dt, e = launch_pdl(down_combine_kernel<T>, grid, dim3(kWarps * 32), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
