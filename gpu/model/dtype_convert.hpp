#pragma once
/// Exact upcasts of stored weight dtypes (F32/F16/BF16) to fp32.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "config/safetensors_header.hpp"

namespace actorserve::gpu {

/// bfloat16 bits -> float (exact: bf16 is the top half of an fp32).
inline float bf16_to_f32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// IEEE half bits -> float (exact, including subnormals, infinities and NaNs).
float f16_to_f32(uint16_t bits);

/// True for the dtypes that `upcast_to_f32` accepts.
inline bool is_float_weight_dtype(st_dtype d) { return d == st_dtype::f32 || d == st_dtype::f16 || d == st_dtype::bf16; }

/// Converts `count` elements at `src` (any alignment) of dtype F32/F16/BF16 into `dst`.
void upcast_to_f32(const std::byte* src, st_dtype dtype, size_t count, float* dst);

}  // namespace actorserve::gpu
