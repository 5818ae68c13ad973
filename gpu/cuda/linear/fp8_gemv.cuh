#pragma once
// Device pieces shared by the FP8 E4M3 GEMVs (fp8_linear_kernel.cu's register kernel for m up
// to 8, fp8_gemv_bulk_kernel.cu's bulk-copy kernel for m = 1, the fused one-token GEMVs of
// fp8_gemv_fused_kernel.cu and fp8_gemv_bulk_kernel.cu, and the tensor-core GEMVs of
// fp8_gemv_mma_kernel.cu): how a 16-byte load of codes unpacks, where a row's 128 x 128 block
// scales lie, how a row's sum becomes its output, and the amax of activation loads.
// Both kernels use these and gemv_common.cuh's dot_load, so their outputs agree bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "gpu/cuda/linear/fp8_linear.hpp"

namespace actorserve::gpu::cuda::dev::fp8 {

inline constexpr int kRows = 4;  // weight rows per block of the register kernel

/// The fp32 bits of an element (every conversion exact).
__device__ __forceinline__ uint32_t f32_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t f32_bits(__nv_bfloat16 v) { return uint32_t(__bfloat16_as_ushort(v)) << 16; }
__device__ __forceinline__ uint32_t f32_bits(__half v) { return __float_as_uint(__half2float(v)); }

/// The largest |x| bits (NaN skipped) of amax and the 8 elements of a 16-byte load; for
/// non-NaN floats the order of the |x| bits is the order of the values.
template <class T>
__device__ __forceinline__ uint32_t amax8(const uint4& raw, uint32_t amax) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t a = f32_bits(e[i]) & 0x7fffffffu;
    if (a <= 0x7f800000u) amax = max(amax, a);
  }
  return amax;
}

/// Two E4M3 values (low byte first) as floats.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

/// E4M3 weights for the GEMV's main loop (gemv_common.cuh): 16 per 16-byte load, in memory order,
/// converted pairwise to fp16 (exact: every E4M3 value is an fp16 value) and then to fp32.
struct e4m3_weights {
  static constexpr int kPerLoad = 16;
  __device__ __forceinline__ static void unpack(const uint4& raw, float* out) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = e4m3x2_to_float2(words[i]), hi = e4m3x2_to_float2(words[i] >> 16);
      out[4 * i] = lo.x;
      out[4 * i + 1] = lo.y;
      out[4 * i + 2] = hi.x;
      out[4 * i + 3] = hi.y;
    }
  }
};

/// The block scales of weight row `row` (fp8_scale_mode::block128, k columns): its 16-weight
/// load c lies in the 128-wide block c / 8 of the returned scale row.
__device__ __forceinline__ const float* block128_scale_row(const float* scale, int row, int k) {
  return scale + size_t(row / kFp8Block) * fp8_blocks(size_t(k));
}

/// The output of weight row `row` whose dot product is `sum`: per_row, times its scale; block128,
/// the sum (the loads' block scales are already in it). The product is spelled out, so no
/// contraction choice of the compiler can tell the kernels that share it apart (fp8_gemv, its
/// bulk-copy form and the fused GEMVs' epilogues, fp8_gemv_epilogue.cuh).
template <fp8_scale_mode Mode>
__device__ __forceinline__ float scaled_sum(float sum, const float* scale, int row) {
  return Mode == fp8_scale_mode::block128 ? sum : __fmul_rn(sum, scale[row]);
}

/// Writes scaled_sum of weight row `row`, adding beta times what `dst` holds (one fma).
template <fp8_scale_mode Mode>
__device__ __forceinline__ void store_row(float* dst, float sum, const float* scale, int row, float beta) {
  const float v = scaled_sum<Mode>(sum, scale, row);
  *dst = beta == 0.0f ? v : fmaf(beta, *dst, v);
}

}  // namespace actorserve::gpu::cuda::dev::fp8
