#include "gpu/model/fp8.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gpu/model/dtype_convert.hpp"

namespace actorserve::gpu {
namespace {

float scale_at(const fp8_scale_view& s, size_t index) {
  float v = 0;
  upcast_to_f32(s.data + index * dtype_size(s.dtype), s.dtype, 1, &v);
  return v;
}

error bad_scale(const fp8_scale_view& s, size_t index, float v) {
  return make_error(error_code::malformed_file,
                    fmt::format("{}: scale tensor '{}' element {} is {} (a finite, non-negative number expected)",
                                s.file, s.name, index, v));
}

}  // namespace

float e4m3_to_f32(uint8_t bits) {
  if (e4m3_is_nan(bits)) return std::numeric_limits<float>::quiet_NaN();
  const int exp = (bits >> 3) & 0xf;
  const int mant = bits & 0x7;
  // Exponent field 0: subnormal, mant x 2^-9; otherwise (8 + mant) x 2^(exp - 10).
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9) : std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return (bits & 0x80u) ? -mag : mag;
}

float round_to_e4m3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a >= e4m3_max) return std::copysign(e4m3_max, x);
  // The spacing of E4M3 values around a: 2^-9 below 2^-6 (subnormals), else 2^(e - 3) for a in [2^e, 2^(e+1)).
  int e = 0;
  std::frexp(a, &e);   // a = m x 2^e with m in [0.5, 1): a lies in [2^(e-1), 2^e)
  const int quantum_exp = a < std::ldexp(1.0f, -6) ? -9 : (e - 1) - 3;
  // nearbyint rounds ties to even under the default rounding mode; scaling by powers of two is exact.
  const float q = std::ldexp(std::nearbyint(std::ldexp(a, -quantum_exp)), quantum_exp);
  return std::copysign(std::fmin(q, e4m3_max), x);
}

bool fp8_scale_shape_ok(fp8_scale_kind kind, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                        const std::vector<int64_t>& shape) {
  switch (kind) {
    case fp8_scale_kind::per_tensor:
      return shape.empty() || shape == std::vector<int64_t>{1};
    case fp8_scale_kind::per_channel:
      return shape == std::vector<int64_t>{rows, 1} || shape == std::vector<int64_t>{rows};
    case fp8_scale_kind::block:
      return block_rows > 0 && block_cols > 0 &&
             shape == std::vector<int64_t>{(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols};
  }
  return false;
}

status dequantize_e4m3(const std::byte* src, int64_t rows, int64_t cols, const fp8_scale_view& scale,
                       const std::string& weight_name, float* dst) {
  const int64_t scale_cols = scale.kind == fp8_scale_kind::block ? (cols + scale.block_cols - 1) / scale.block_cols : 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const auto bits = static_cast<uint8_t>(src[i]);
      if (e4m3_is_nan(bits))
        return make_error(error_code::malformed_file,
                          fmt::format("{}: F8_E4M3 tensor '{}' holds NaN at [{}, {}]", scale.file, weight_name, r, c));
      size_t si = 0;
      if (scale.kind == fp8_scale_kind::per_channel) si = static_cast<size_t>(r);
      if (scale.kind == fp8_scale_kind::block)
        si = static_cast<size_t>((r / scale.block_rows) * scale_cols + c / scale.block_cols);
      const float s = scale_at(scale, si);
      if (!std::isfinite(s) || s < 0) return bad_scale(scale, si, s);
      dst[i] = e4m3_to_f32(bits) * s;
    }
  }
  return {};
}

uint8_t e4m3_encode(float x) {
  const float r = round_to_e4m3(x);
  if (std::isnan(r)) return 0x7f;
  const uint8_t sign = std::signbit(r) ? 0x80 : 0x00;
  const float a = std::fabs(r);
  // The finite non-negative codes 0x00..0x7e increase with their values: search them.
  uint8_t lo = 0, hi = 0x7e;
  while (lo < hi) {
    const uint8_t mid = uint8_t((lo + hi) / 2);
    if (e4m3_to_f32(mid) < a) lo = uint8_t(mid + 1);
    else hi = mid;
  }
  return uint8_t(sign | lo);
}

void quantize_rows_e4m3(float* w, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    if (amax == 0) continue;
    round_through_e4m3(row, cols, amax / e4m3_max);
  }
}

void round_through_e4m3(float* v, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) v[i] = round_to_e4m3(v[i] / scale) * scale;
}

}  // namespace actorserve::gpu
