#include "gpu/model/dtype_convert.hpp"

#include "config/check.hpp"

namespace actorserve::gpu {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: normalise the mantissa into an fp32 normal.
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void upcast_to_f32(const std::byte* src, st_dtype dtype, size_t count, float* dst) {
  switch (dtype) {
    case st_dtype::f32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case st_dtype::bf16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
    case st_dtype::f16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = f16_to_f32(b);
      }
      return;
    default:
      AS_CHECK(false, "upcast_to_f32: caller must check is_float_weight_dtype");
  }
}

}  // namespace actorserve::gpu
