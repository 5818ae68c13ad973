#pragma once
// The device E4M3 encoder shared by the FP8 weight and activation quantizers
// (linear/fp8_linear_kernel.cu) and the FP8 KV-cache write (ops/elementwise_kernels.cu): integer
// arithmetic on the fp32 bits and one explicit IEEE division, so that no floating-point compiler
// flag (-ftz, -prec-div, --use_fast_math) changes a code, and every code is the one
// gpu::e4m3_encode (gpu/model/fp8.hpp) gives on the host.
#include <cstdint>

namespace actorserve::gpu::cuda::dev {

/// The E4M3 code of the fp32 value with bits `u`, as gpu::e4m3_encode (host) gives it: round to
/// nearest, ties to even; below 2^-6 in subnormal steps of 2^-9; |x| >= 448 (infinity included)
/// saturates to +-448 (0x7e / 0xfe); NaN of either sign is 0x7f; -0 and negative values that round
/// to zero are 0x80. Built for the host too: there it matches e4m3_encode on all 2^32 fp32 bit patterns.
__host__ __device__ __forceinline__ uint8_t e4m3_code(uint32_t u) {
  const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                    // NaN
  if (a >= 0x43e00000u) return uint8_t(sign | 0x7eu);  // 448 = 1.75 x 2^8 and above
  uint32_t code;
  if (a >= 0x3c800000u) {
    // Normal (2^-6 <= |x| < 448): keep 3 of the 23 mantissa bits, rounding the 20 dropped ones to
    // nearest even (a carry moves into the exponent), and rebias the exponent from 127 to 7.
    const uint32_t kept = a >> 20, rest = a & 0xfffffu;
    code = kept + uint32_t(rest > 0x80000u || (rest == 0x80000u && (kept & 1u))) - (120u << 3);
  } else {
    // Subnormal: |x| / 2^-9 rounded to an integer 0..8, which is the code (8 is 0x08 = 2^-6).
    // |x| = m x 2^(e - 150) with the implicit bit in m (e = 1 for fp32 subnormals), so
    // |x| / 2^-9 = m / 2^shift with shift = 141 - e >= 21; from shift 25 on it is below 1/2.
    const uint32_t e = a >> 23;
    const uint32_t m = e ? (a & 0x7fffffu) | 0x800000u : a;
    const uint32_t shift = 141u - (e ? e : 1u);
    if (shift >= 25u) {
      code = 0;
    } else {
      const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      code = kept + uint32_t(rest > half || (rest == half && (kept & 1u)));
    }
  }
  return uint8_t(sign | code);
}

/// a / b rounded to nearest even with subnormals kept, whatever -ftz / -prec-div say.
__device__ __forceinline__ float div_rn_ieee(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

}  // namespace actorserve::gpu::cuda::dev
