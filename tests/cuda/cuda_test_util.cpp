#include "cuda_test_util.hpp"

#include <cuda_fp16.h>

namespace actorserve::testing {

uint16_t f32_to_f16_bits(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

float f16_bits_to_f32(uint16_t b) {
  return __half2float(__ushort_as_half(b));
}

}  // namespace actorserve::testing
