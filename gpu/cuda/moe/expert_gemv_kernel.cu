// The expert GEMV of one-token steps (moe_kernels.hpp): each (token, slot) pair against its own
// expert's weight rows, one warp per output row (or gate/up row pair), 16-byte loads, fp32
// accumulation.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 8;
constexpr int kMinBlocks = 4;  ///< at most 64 registers: 32 warps an SM keep their loads in flight

/// What one warp of either kernel below works on in grid (ceil(N / kWarps), num_pairs): output
/// row `row` of pair p, whose expert is e and whose activation row is x.
template <class T>
struct warp_work {
  int p, lane, row, e;
  const T* x;
};

/// This warp's work; false for a warp past the last row, which has none. Reads the
/// experts, so it comes after pdl_begin.
template <class T>
__device__ __forceinline__ bool warp_work_of(const expert_gemv_args& a, warp_work<T>& ww) {
  ww.p = blockIdx.y;
  ww.lane = threadIdx.x & 31;
  ww.row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (ww.row >= a.n) return false;
  ww.e = a.experts[ww.p];
  ww.x = static_cast<const T*>(a.a) + size_t(ww.p / a.a_rows_div) * a.k;
  return true;
}

/// Out: float, or T for an output a SiLU kernel reads.
template <class T, class Out>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) expert_gemv_kernel(expert_gemv_args a) {
  pdl_begin();
  warp_work<T> ww;
  if (!warp_work_of(a, ww)) return;
  const T* const x[1] = {ww.x};
  const T* const w[1] = {static_cast<const T*>(a.w) + (size_t(ww.e) * a.n + ww.row) * a.k};
  float acc[1] = {0.0f};
  lane_dots<T, 1, 1>(x, w, a.k, ww.lane, acc);
  const float v = warp_sum(acc[0]);
  if (ww.lane == 0) store_out(static_cast<Out*>(a.y) + size_t(ww.p) * a.n + ww.row, v);
}

/// silu_and_mul fused: warp `row` takes gate row `row` and up row N + row of the expert; both
/// dots are rounded to T as the 16-bit gate_up output would be, then SiLU(gate) * up rounded
/// to T, the numbers expert_gemv with y_act followed by silu_and_mul_act gives.
template <class T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) expert_gemv_silu_kernel(expert_gemv_args a) {
  pdl_begin();
  warp_work<T> ww;
  if (!warp_work_of(a, ww)) return;
  const T* const x[1] = {ww.x};
  const T* gate = static_cast<const T*>(a.w) + (size_t(ww.e) * 2 * a.n + ww.row) * a.k;
  const T* const w[2] = {gate, gate + size_t(a.n) * a.k};
  float acc[2] = {0.0f, 0.0f};
  lane_dots<T, 1, 2>(x, w, a.k, ww.lane, acc);
  const float g = to_f32(from_f32<T>(warp_sum(acc[0]))), u = to_f32(from_f32<T>(warp_sum(acc[1])));
  if (ww.lane == 0) static_cast<T*>(a.y)[size_t(ww.p) * a.n + ww.row] = silu_mul<T>(g, u);
}

}  // namespace

int expert_gemv(act_dtype dt, const expert_gemv_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  const dim3 grid((a.n + kWarps - 1) / kWarps, a.num_pairs);
  cudaError_t e = cudaSuccess;
  if (a.silu_and_mul)
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_silu_kernel<T>, grid, dim3(kWarps * 32), s, a));
  else if (a.y_act)
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_kernel<T, T>, grid, dim3(kWarps * 32), s, a));
  else
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_kernel<T, float>, grid, dim3(kWarps * 32), s, a));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
