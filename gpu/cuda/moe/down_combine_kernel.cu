// The one-token down projection fused with the weighted combine (moe_kernels.hpp): each slot's
// dot product of one output column is computed exactly as expert_gemv computes it, and the
// column's slots are added weighted in ascending expert order exactly as moe_combine adds them,
// so the fp32 y between the two kernels never goes to memory and the result is the same bits.
// Two kernels share that order: a warp a column (two slots' loads in flight at a time), or, for
// long rows (moe_down_slot_warps_min_k), a warp a slot. E4M3 weights take expert_gemv's E4M3
// dot products in either kernel.
#include "gpu/cuda/moe/moe_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

/// The slots of token t in ascending expert order, as moe_combine sorts them, into shared
/// ex / pair / weight (thread 0 sorts; the caller syncs).
__device__ __forceinline__ void sort_token_slots(const moe_down_combine_args& a, int t, int32_t* ex, int32_t* pair,
                                                 float* weight) {
  if (threadIdx.x != 0) return;
  const int K = a.top_k;
  const auto pair_of = [&](int j) { return t * K + j; };
  sort_slots_by_expert(a.experts + size_t(t) * K, a.weights + size_t(t) * K, K, pair_of, ex, pair, weight);
}

/// Column c's down row of expert e: of dt, or E4M3 codes.
template <class W>
__device__ __forceinline__ const W* down_row(const moe_down_combine_args& a, int e, int c) {
  return static_cast<const W*>(a.w) + (size_t(e) * a.hidden + c) * a.k;
}

/// The dot products of slots j of a token with column c's down rows of their experts, R at a
/// time (xs: their act rows), as expert_gemv computes them: lane_dots over dt weights, or
/// (kFp8) over E4M3 codes, scaled as expert_gemv's E4M3 path scales them. Every lane gets them.
template <class T, bool kFp8, fp8_scale_mode Mode, int R>
__device__ __forceinline__ void slot_dots(const moe_down_combine_args& a, const int32_t* ex, const int (&j)[R], int c,
                                          const T* const (&xs)[R], int lane, float (&d)[R]) {
  float acc[R] = {};
  if constexpr (kFp8) {
    const uint8_t* ws[R];
    const float* scales[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      ws[r] = down_row<uint8_t>(a, ex[j[r]], c);
      scales[r] = expert_fp8_scale_row(a.fp8, ex[j[r]], c, a.hidden, a.k);
    }
    lane_dots_e4m3<T, Mode, R, R>(xs, ws, scales, a.k, lane, acc);
#pragma unroll
    for (int r = 0; r < R; ++r) d[r] = expert_fp8_scaled<Mode>(warp_sum(acc[r]), scales[r]);
  } else {
    const T* ws[R];
#pragma unroll
    for (int r = 0; r < R; ++r) ws[r] = down_row<T>(a, ex[j[r]], c);
    lane_dots<T, R, R>(xs, ws, a.k, lane, acc);
#pragma unroll
    for (int r = 0; r < R; ++r) d[r] = warp_sum(acc[r]);
  }
}

/// out[t][c] as a.accumulate says.
__device__ __forceinline__ void store_column(const moe_down_combine_args& a, int t, int c, float sum) {
  float* out = a.out + size_t(t) * a.hidden + c;
  *out = a.accumulate ? *out + sum : sum;
}

namespace column_warps {
constexpr int kWarps = 4;       ///< columns a CTA: 512 CTAs a token at hidden 2048
constexpr int kMinBlocks = 4;   ///< 128 registers at most: a one-token grid fits in one wave

/// A warp a column. Grid (ceil(hidden / kWarps), n). kFp8: E4M3 weights of scale mode Mode.
template <class T, bool kFp8, fp8_scale_mode Mode>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) kernel(moe_down_combine_args a) {
  __shared__ int32_t ex[moe_max_top_k], pair[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  pdl_begin();
  const int t = blockIdx.y, K = a.top_k;
  sort_token_slots(a, t, ex, pair, weight);
  __syncthreads();
  const int lane = threadIdx.x & 31, c = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (c >= a.hidden) return;
  const T* act = static_cast<const T*>(a.act);
  const auto x_of = [&](int j) { return act + size_t(pair[j]) * a.k; };
  float sum = 0.0f;
  int j = 0;
  for (; j + 1 < K; j += 2) {
    const int js[2] = {j, j + 1};
    const T* const xs[2] = {x_of(j), x_of(j + 1)};
    float d[2];
    slot_dots<T, kFp8, Mode, 2>(a, ex, js, c, xs, lane, d);
    sum += weight[j] * d[0];
    sum += weight[j + 1] * d[1];
  }
  if (j < K) {  // an odd top_k's last slot
    const int js[1] = {j};
    const T* const xs[1] = {x_of(j)};
    float d[1];
    slot_dots<T, kFp8, Mode, 1>(a, ex, js, c, xs, lane, d);
    sum += weight[j] * d[0];
  }
  if (lane == 0) store_column(a, t, c, sum);
}
}  // namespace column_warps

namespace slot_warps {
constexpr int kWarps = 8;      ///< warps a block at most
constexpr int kMinBlocks = 4;  ///< at most 64 registers: 32 warps an SM keep their loads in flight

/// Warps a column takes: one a slot, at most kWarps (a warp then takes every kWarps-th slot).
__host__ __device__ inline int per_column(int top_k) { return top_k < kWarps ? top_k : kWarps; }

/// A warp a slot; a block takes kWarps / per_column(top_k) columns. Grid (ceil(hidden /
/// columns), n) of columns * per_column(top_k) warps. The column's first warp adds the slots'
/// dot products, kept in shared memory, in slot order. kFp8: E4M3 weights of scale mode Mode.
template <class T, bool kFp8, fp8_scale_mode Mode>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) kernel(moe_down_combine_args a) {
  __shared__ int32_t ex[moe_max_top_k], pair[moe_max_top_k];
  __shared__ float weight[moe_max_top_k];
  __shared__ float dots[kWarps][moe_max_top_k];  ///< [column of the block][slot]
  pdl_begin();
  const int t = blockIdx.y, K = a.top_k, P = per_column(K), columns = kWarps / P;
  sort_token_slots(a, t, ex, pair, weight);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = warp / P, c = blockIdx.x * columns + col;
  const T* act = static_cast<const T*>(a.act);
  if (c < a.hidden) {
    for (int j = warp % P; j < K; j += P) {
      const int js[1] = {j};
      const T* const xs[1] = {act + size_t(pair[j]) * a.k};
      float d[1];
      slot_dots<T, kFp8, Mode, 1>(a, ex, js, c, xs, lane, d);
      if (lane == 0) dots[col][j] = d[0];
    }
  }
  __syncthreads();
  if (c >= a.hidden || warp % P != 0 || lane != 0) return;
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) sum += weight[j] * dots[col][j];
  store_column(a, t, c, sum);
}
}  // namespace slot_warps

/// The kernel for a's rows (moe_down_slot_warps_min_k), of weights of T or E4M3 (kFp8, Mode).
template <class T, bool kFp8, fp8_scale_mode Mode>
cudaError_t launch_down_combine(const moe_down_combine_args& a, cudaStream_t s) {
  if (a.k >= moe_down_slot_warps_min_k) {
    const int per_column = slot_warps::per_column(a.top_k), columns = slot_warps::kWarps / per_column;
    const dim3 grid((a.hidden + columns - 1) / columns, a.n);
    return launch_pdl(slot_warps::kernel<T, kFp8, Mode>, grid, dim3(columns * per_column * 32), s, a);
  }
  const dim3 grid((a.hidden + column_warps::kWarps - 1) / column_warps::kWarps, a.n);
  return launch_pdl(column_warps::kernel<T, kFp8, Mode>, grid, dim3(column_warps::kWarps * 32), s, a);
}

}  // namespace

int moe_down_combine(act_dtype dt, const moe_down_combine_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.top_k < 1 || a.top_k > moe_max_top_k || a.k % 8 != 0 || reinterpret_cast<uintptr_t>(a.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || (a.fp8.scale && (a.k % 16 != 0 || a.fp8.parts != 1)))
    return int(cudaErrorInvalidValue);
  constexpr auto kRow = fp8_scale_mode::per_row, kBlock = fp8_scale_mode::block128;
  cudaError_t e = cudaSuccess;
  if (!a.fp8.scale)
    AS_DISPATCH_ACT(dt, e = (launch_down_combine<T, false, kRow>(a, s)));
  else if (a.fp8.mode == kBlock)
    AS_DISPATCH_ACT(dt, e = (launch_down_combine<T, true, kBlock>(a, s)));
  else
    AS_DISPATCH_ACT(dt, e = (launch_down_combine<T, true, kRow>(a, s)));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
