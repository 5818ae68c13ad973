// The expert GEMV of one-token steps (moe_kernels.hpp): each (token, slot) pair against its own
// expert's weight rows, one warp per output row, 16-byte loads, fp32 accumulation.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 8;

/// Grid (ceil(N / kWarps), num_pairs).
template <class T, class Out>
__global__ void __launch_bounds__(kWarps * 32) expert_gemv_kernel(expert_gemv_args a) {
  pdl_begin();
  const int p = blockIdx.y, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= a.n) return;
  const int e = a.experts[p];
  const T* x = static_cast<const T*>(a.a) + size_t(p / a.a_rows_div) * a.k;
  const T* w = static_cast<const T*>(a.w) + (size_t(e) * a.n + row) * a.k;
  float acc = 0.0f;
  for (int i = lane * 8; i < a.k; i += 32 * 8) {
    float xv[8], wv[8];
    load8(x + i, xv);
    load8(w + i, wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc += xv[j] * wv[j];
  }
  acc = warp_sum(acc);
  if (lane == 0) store_out(static_cast<Out*>(a.y) + size_t(p) * a.n + row, acc);
}

}  // namespace

int expert_gemv(act_dtype dt, const expert_gemv_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const dim3 grid((a.n + kWarps - 1) / kWarps, a.num_pairs);
  cudaError_t e = cudaSuccess;
  if (a.y_act)
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_kernel<T, T>, grid, dim3(kWarps * 32), s, a));
  else
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_kernel<T, float>, grid, dim3(kWarps * 32), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
