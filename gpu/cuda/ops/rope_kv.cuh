#pragma once
// The per-pair maths of rope_kv_write (elementwise_kernels.cu), which the fused QKV + rope GEMVs'
// epilogue (linear/gemv_common.cuh, qkv_rope_store) repeats for its rotary pair, and whose cos,
// sin and rotation the MLA latent write (mla/latent_write_kernel.cu) takes for DeepSeek's interleaved
// pairs: the angle's cos and sin, the rotation, and a paged-cache element (16-bit or FP8 E4M3). The rounding is spelled
// out (named products and fmas), so no contraction choice of the compiler can tell the two
// kernels apart: from the same projections they write the same bits.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda/fp8_code.cuh"
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda::dev {

/// cos and sin of the angle position x inv_freq, each times the attention factor (YaRN's; 1 else).
__device__ __forceinline__ float2 rope_cos_sin(int position, float inv_freq, float attention_factor) {
  const float ang = __fmul_rn(float(position), inv_freq);
  return make_float2(__fmul_rn(cosf(ang), attention_factor), __fmul_rn(sinf(ang), attention_factor));
}

/// The rotary pair (x1, x2) rotated by cs = (cos, sin): (x1 cos - x2 sin, x2 cos + x1 sin).
__device__ __forceinline__ float2 rope_rotate(float x1, float x2, float2 cs) {
  return make_float2(__fmaf_rn(x1, cs.x, -__fmul_rn(x2, cs.y)), __fmaf_rn(x2, cs.x, __fmul_rn(x1, cs.y)));
}

/// One cache element: the value rounded to the activation dtype, or (C = uint8_t, the FP8 cache)
/// the E4M3 code of value / scale, as gpu::e4m3_encode gives it.
template <class T, class C>
__device__ __forceinline__ C kv_elem(float x, float scale) {
  if constexpr (std::is_same_v<C, uint8_t>)
    return e4m3_code(__float_as_uint(div_rn_ieee(x, scale)));
  else
    return (void)scale, from_f32<T>(x);
}

/// Element i of a paged cache set to kv_elem of x: T, or (fp8, --kv-cache-dtype fp8) uint8_t.
template <class T>
__device__ __forceinline__ void store_kv(void* cache, size_t i, float x, bool fp8, float scale) {
  if (fp8)
    static_cast<uint8_t*>(cache)[i] = kv_elem<T, uint8_t>(x, scale);
  else
    static_cast<T*>(cache)[i] = kv_elem<T, T>(x, scale);
}

}  // namespace actorserve::gpu::cuda::dev
