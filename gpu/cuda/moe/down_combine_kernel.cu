// The one-token down projection fused with the weighted combine (moe_kernels.hpp): a warp takes
// one output column of one token and, slot by slot in ascending expert order, computes each
// slot's dot product exactly as expert_gemv does and adds it weighted exactly as moe_combine
// does, so the fp32 y between the two kernels never goes to memory and the result is the same
// bits. Two slots' loads go out together (the sum still adds them in order), so that a step's
// loads in flight cover the memory latency.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 4;       ///< columns a CTA: 512 CTAs a token at hidden 2048
constexpr int kMinBlocks = 4;   ///< 128 registers at most: a one-token grid fits in one wave

/// Grid (ceil(hidden / kWarps), n).
template <class T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) down_combine_kernel(moe_down_combine_args a) {
  __shared__ int32_t ex[moe_max_top_k], pair[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  pdl_begin();
  const int t = blockIdx.y, K = a.top_k;
  if (threadIdx.x == 0) {  // the slots by ascending expert, as moe_combine sorts them
    const auto pair_of = [&](int j) { return t * K + j; };
    sort_slots_by_expert(a.experts + size_t(t) * K, a.weights + size_t(t) * K, K, pair_of, ex, pair, weight);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, c = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (c >= a.hidden) return;
  const T* act = static_cast<const T*>(a.act);
  const T* w = static_cast<const T*>(a.w);
  const auto x_of = [&](int j) { return act + size_t(pair[j]) * a.k; };
  const auto w_of = [&](int j) { return w + (size_t(ex[j]) * a.hidden + c) * a.k; };
  float sum = 0.0f;
  int j = 0;
  for (; j + 1 < K; j += 2) {
    const T* const xs[2] = {x_of(j), x_of(j + 1)};
    const T* const ws[2] = {w_of(j), w_of(j + 1)};
    float acc[2] = {0.0f, 0.0f};
    lane_dots<T, 2, 2>(xs, ws, a.k, lane, acc);
    sum += weight[j] * warp_sum(acc[0]);
    sum += weight[j + 1] * warp_sum(acc[1]);
  }
  if (j < K) {  // an odd top_k's last slot
    const T* const xs[1] = {x_of(j)};
    const T* const ws[1] = {w_of(j)};
    float acc[1] = {0.0f};
    lane_dots<T, 1, 1>(xs, ws, a.k, lane, acc);
    sum += weight[j] * warp_sum(acc[0]);
  }
  if (lane != 0) return;
  float* out = a.out + size_t(t) * a.hidden + c;
  *out = a.accumulate ? *out + sum : sum;
}

}  // namespace

int moe_down_combine(act_dtype dt, const moe_down_combine_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.top_k < 1 || a.top_k > moe_max_top_k || a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const dim3 grid((a.hidden + kWarps - 1) / kWarps, a.n);
  cudaError_t e = cudaSuccess;
  AS_DISPATCH_ACT(dt, e = launch_pdl(down_combine_kernel<T>, grid, dim3(kWarps * 32), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
