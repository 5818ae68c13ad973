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

/// silu_and_mul over E4M3 experts (a.fp8): warp `row` of pair p takes gate row `row` and up row
/// N + row of its expert's codes, each dot product scaled as fp8_gemv's, rounded to T, then
/// SiLU(gate) * up rounded to T.
template <class T, fp8_scale_mode Mode>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) expert_gemv_silu_e4m3_kernel(expert_gemv_args a) {
  pdl_begin();
  const int p = blockIdx.y, lane = threadIdx.x & 31, row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= a.n) return;
  const int e = a.experts[p], rows = 2 * a.n;
  const T* const x[1] = {static_cast<const T*>(a.a) + size_t(p / a.a_rows_div) * a.k};
  const uint8_t* gate = static_cast<const uint8_t*>(a.w) + (size_t(e) * rows + row) * a.k;
  const uint8_t* const w[2] = {gate, gate + size_t(a.n) * a.k};
  const float* const scales[2] = {expert_fp8_scale_row(a.fp8, e, row, rows, a.k),
                                  expert_fp8_scale_row(a.fp8, e, a.n + row, rows, a.k)};
  float acc[2] = {0.0f, 0.0f};
  lane_dots_e4m3<T, Mode, 1, 2>(x, w, scales, a.k, lane, acc);
  const float g = to_f32(from_f32<T>(expert_fp8_scaled<Mode>(warp_sum(acc[0]), scales[0])));
  const float u = to_f32(from_f32<T>(expert_fp8_scaled<Mode>(warp_sum(acc[1]), scales[1])));
  if (lane == 0) static_cast<T*>(a.y)[size_t(p) * a.n + row] = silu_mul<T>(g, u);
}

/// The E4M3 path of expert_gemv (a.fp8.scale set).
cudaError_t expert_gemv_e4m3(act_dtype dt, const expert_gemv_args& a, cudaStream_t s) {
  if (a.k % 16 != 0 || !a.silu_and_mul || a.fp8.parts < 1 || a.fp8.parts > 2)
    return cudaErrorInvalidValue;
  const dim3 grid((a.n + kWarps - 1) / kWarps, a.num_pairs);
  cudaError_t e = cudaSuccess;
  if (a.fp8.mode == fp8_scale_mode::block128)
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_silu_e4m3_kernel<T, fp8_scale_mode::block128>, grid,
                                       dim3(kWarps * 32), s, a));
  else
    AS_DISPATCH_ACT(dt, e = launch_pdl(expert_gemv_silu_e4m3_kernel<T, fp8_scale_mode::per_row>, grid,
                                       dim3(kWarps * 32), s, a));
  return e;
}

}  // namespace

int expert_gemv(act_dtype dt, const expert_gemv_args& a, cudaStream_t s) {
  if (a.num_pairs == 0) return 0;
  if (a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.a) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return int(cudaErrorInvalidValue);
  if (a.fp8.scale) return int(expert_gemv_e4m3(dt, a, s));
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
