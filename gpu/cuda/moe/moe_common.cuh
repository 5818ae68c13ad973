#pragma once
// Device helpers of the expert kernels.
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/linear/fp8_gemv.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda::dev {

/// 16 bytes global -> shared as attn_dev::cp_async16 (bypassing L1, `bytes` < 16 zero-filling
/// the rest), with L2 asked to fetch the 256-byte block around `src`: a weight row streamed in
/// 128-byte slices then comes from DRAM 256 contiguous bytes at a time, its next slice from L2.
__device__ __forceinline__ void cp_async16_prefetch256(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

/// Stores an fp32 result as the output's type: rounded to T, or as it is.
template <class T>
__device__ __forceinline__ void store_out(T* y, float v) { *y = from_f32<T>(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

/// One lane's share of R dot products x[r] . w[r] over [0, K) (K % 8 == 0): the lane's 8-element
/// chunks at lane * 8 + 256 m in ascending m, each added element by element into acc[r], so that
/// warp_sum(acc[r]) is the same number whichever kernel asks. kUnroll chunks' 16-byte loads are
/// issued before their first use and kept raw (4 registers a chunk) until then; the weights
/// stream past L1 as the dense GEMV's do. x is one vector for all rows (RX = 1) or one a row
/// (RX = R).
template <class T, int RX, int R>
__device__ __forceinline__ void lane_dots(const T* const (&x)[RX], const T* const (&w)[R], int K, int lane,
                                          float (&acc)[R]) {
  static_assert(RX == 1 || RX == R, "one x for all rows, or one a row");
  constexpr int kUnroll = 4;
  for (int i0 = lane * 8; i0 < K; i0 += 32 * 8 * kUnroll) {
    uint4 xr[kUnroll][RX], wr[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * 32 * 8;
      if (i >= K) continue;
#pragma unroll
      for (int r = 0; r < RX; ++r) xr[u][r] = *reinterpret_cast<const uint4*>(x[r] + i);
#pragma unroll
      for (int r = 0; r < R; ++r) wr[u][r] = gemv::load_stream(reinterpret_cast<const uint4*>(w[r] + i));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i0 + u * 32 * 8 >= K) continue;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const T* xe = reinterpret_cast<const T*>(&xr[u][RX == 1 ? 0 : r]);
        const T* we = reinterpret_cast<const T*>(&wr[u][r]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] += to_f32(xe[j]) * to_f32(we[j]);
      }
    }
  }
}

/// One lane's share of R dot products of E4M3 weight rows w[r] (codes) with x over [0, K)
/// (K % 16 == 0): the lane's 16-weight loads at lane * 16 + 512 m in ascending m, each load's
/// products summed in fp8_gemv's form (gemv::dot_load: per_row, each product joins acc[r] in
/// element order; block128, the load's sum from 0 joins acc[r] times its block's scale,
/// block_scales[r][i / 128]). The caller takes warp_sum(acc[r]) and, per_row, the row's scale.
/// kUnroll weight loads a row are in flight before the first use; x (hot in L1 / L2) is read
/// as it is used.
template <class T, fp8_scale_mode Mode, int RX, int R>
__device__ __forceinline__ void lane_dots_e4m3(const T* const (&x)[RX], const uint8_t* const (&w)[R],
                                               const float* const (&block_scales)[R], int K, int lane,
                                               float (&acc)[R]) {
  static_assert(RX == 1 || RX == R, "one x for all rows, or one a row");
  constexpr int kUnroll = 4, kPer = fp8::e4m3_weights::kPerLoad;
  constexpr bool kScaled = Mode == fp8_scale_mode::block128;
  for (int i0 = lane * kPer; i0 < K; i0 += 32 * kPer * kUnroll) {
    uint4 wr[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * 32 * kPer;
      if (i >= K) continue;
#pragma unroll
      for (int r = 0; r < R; ++r) wr[u][r] = gemv::load_stream(reinterpret_cast<const uint4*>(w[r] + i));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * 32 * kPer;
      if (i >= K) continue;
      float xf[RX][kPer];
#pragma unroll
      for (int r = 0; r < RX; ++r) {
        gemv::unpack8<T>(*reinterpret_cast<const uint4*>(x[r] + i), xf[r]);
        gemv::unpack8<T>(*reinterpret_cast<const uint4*>(x[r] + i + 8), xf[r] + 8);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wf[kPer];
        fp8::e4m3_weights::unpack(wr[u][r], wf);
        const float sc = kScaled ? __ldg(block_scales[r] + i / kFp8Block) : 1.0f;
        acc[r] = gemv::dot_load<kPer, kScaled>(wf, xf[RX == 1 ? 0 : r], sc, acc[r]);
      }
    }
  }
}

/// Row `row` of expert e's E4M3 matrix of `rows` rows (s.parts parts) and K columns: its per-row
/// scale (per_row) or the start of its block-scale row (block128).
__device__ __forceinline__ const float* expert_fp8_scale_row(const moe_fp8_scales& s, int e, int row, int rows,
                                                             int K) {
  if (s.mode == fp8_scale_mode::per_row) return s.scale + size_t(e) * rows + row;
  const int part_rows = rows / s.parts, part = row / part_rows;
  const size_t kb = fp8_blocks(size_t(K)), part_blocks = fp8_blocks(size_t(part_rows));
  return s.scale + ((size_t(e) * s.parts + part) * part_blocks + (row - part * part_rows) / kFp8Block) * kb;
}

/// A row's dot product `sum` of E4M3 weights as fp8_gemv outputs it: per_row, times the row's
/// scale (scale_row[0]); block128, as it is (the block scales are in it).
template <fp8_scale_mode Mode>
__device__ __forceinline__ float expert_fp8_scaled(float sum, const float* scale_row) {
  return fp8::scaled_sum<Mode>(sum, scale_row, 0);
}

/// One token's top_k slots in ascending expert order, the order both combines sum them in: an
/// insertion sort of the K entries experts[j], with slot j's row_of(j) and weights[j] moved along
/// into ex, row and weight. The sort is stable; a router never picks an expert twice. One thread
/// sorts; the arrays may be shared or the thread's own.
template <class RowOf>
__device__ __forceinline__ void sort_slots_by_expert(const int32_t* experts, const float* weights, int K,
                                                     RowOf row_of, int32_t* ex, int32_t* row, float* weight) {
  for (int j = 0; j < K; ++j) {
    const int32_t e = experts[j];
    int i = j;
    for (; i > 0 && ex[i - 1] > e; --i) {
      ex[i] = ex[i - 1];
      row[i] = row[i - 1];
      weight[i] = weight[i - 1];
    }
    ex[i] = e;
    row[i] = row_of(j);
    weight[i] = weights[j];
  }
}

}  // namespace actorserve::gpu::cuda::dev
