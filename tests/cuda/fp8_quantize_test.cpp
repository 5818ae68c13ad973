// fp8_quantize_rows (gpu/cuda/linear/fp8_linear.hpp), the device rounding of --quantization fp8,
// against the host, from fp32, bf16 and fp16 weights: each row's scale (amax / 448) and each
// element's E4M3 code bit for bit as gpu::e4m3_encode gives them, and code x scale equal to what
// the CPU executor's quantize_rows_e4m3 computes with. Rows: every E4M3 value, the ties between
// neighbours and the source values next to them, at several power-of-two scales; random rows over
// a wide range with zeros; all-zero and negative-zero rows; huge, tiny (subnormal) and mixed rows;
// rows whose largest element divides to just above 448 and saturates; infinities and NaN (fp32).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {
namespace {

using cuda::src_dtype;

constexpr src_dtype kSources[] = {src_dtype::f32, src_dtype::bf16, src_dtype::f16};

const char* name(src_dtype sd) {
  switch (sd) {
    case src_dtype::f32: return "f32";
    case src_dtype::bf16: return "bf16";
    default: return "f16";
  }
}

uint32_t f32_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

/// `v` rounded to `sd`, as the bits of that dtype.
uint32_t store_bits(src_dtype sd, float v) {
  switch (sd) {
    case src_dtype::f32: return f32_bits(v);
    case src_dtype::bf16: return f32_to_bf16_bits(v);
    default: return f32_to_f16_bits(v);
  }
}

float load_bits(src_dtype sd, uint32_t b) {
  switch (sd) {
    case src_dtype::f32: {
      float v;
      std::memcpy(&v, &b, 4);
      return v;
    }
    case src_dtype::bf16: return bf16_bits_to_f32(uint16_t(b));
    default: return f16_bits_to_f32(uint16_t(b));
  }
}

float stored(src_dtype sd, float v) { return load_bits(sd, store_bits(sd, v)); }

/// [rows][cols] weights as stored in `sd` (bytes, row-major) and the fp32 values they hold.
struct weights {
  src_dtype sd;
  int cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;

  int rows() const { return int(values.size() / size_t(cols)); }
  /// Appends a row of `row` rounded to sd, padded with zeros to cols.
  void add_row(std::vector<float> row) {
    row.resize(size_t(cols), 0.0f);
    const size_t elem = sd == src_dtype::f32 ? 4 : 2;
    for (float v : row) {
      const uint32_t b = store_bits(sd, v);
      const size_t at = bytes.size();
      bytes.resize(at + elem);
      std::memcpy(bytes.data() + at, &b, elem);  // little-endian: the low bytes
      values.push_back(load_bits(sd, b));
    }
  }
};

struct quantized {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

quantized on_device(const weights& w) {
  const size_t n = w.values.size();
  dev_vec<uint8_t> src(w.bytes), q(n);
  dev_vec<float> scale(size_t(w.rows()));
  q.poison();
  scale.poison();
  EXPECT_EQ(cuda::fp8_quantize_rows(src.get(), w.sd, w.rows(), w.cols, q.get(), scale.get(), nullptr), 0);
  return {q.download(), scale.download()};
}

/// The host's codes and scales: amax over the row (std::fmax skips NaN), s = amax / 448,
/// e4m3_encode(x / s), codes 0 where amax is 0.
quantized on_host(const weights& w) {
  quantized h;
  const size_t cols = size_t(w.cols);
  for (int r = 0; r < w.rows(); ++r) {
    const float* row = w.values.data() + size_t(r) * cols;
    float amax = 0;
    for (size_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    const float s = amax / gpu::e4m3_max;
    h.scale.push_back(s);
    for (size_t c = 0; c < cols; ++c) h.q.push_back(amax == 0 ? 0 : gpu::e4m3_encode(row[c] / s));
  }
  return h;
}

bool same_value(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

/// The device's codes and scales are the host's, bit for bit, and code x scale is the value the
/// CPU executor's quantize_rows_e4m3 computes with (rows whose amax is 0, which it leaves as they
/// are, aside).
void expect_as_host(const weights& w, const std::string& what) {
  const quantized got = on_device(w), want = on_host(w);
  const size_t cols = size_t(w.cols);
  ASSERT_EQ(got.q.size(), want.q.size());
  std::vector<float> cpu = w.values;
  gpu::quantize_rows_e4m3(cpu.data(), w.rows(), w.cols);
  for (int r = 0; r < w.rows(); ++r) {
    const size_t rr = size_t(r);
    ASSERT_EQ(f32_bits(got.scale[rr]), f32_bits(want.scale[rr]))
        << what << " " << name(w.sd) << ": row " << r << " scale " << got.scale[rr] << ", host " << want.scale[rr];
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = rr * cols + c;
      ASSERT_EQ(int(got.q[i]), int(want.q[i]))
          << what << " " << name(w.sd) << ": [" << r << ", " << c << "] = " << w.values[i] << " (0x" << std::hex
          << f32_bits(w.values[i]) << std::dec << "), scale " << want.scale[rr];
    }
    bool amax_zero = true;
    for (size_t c = 0; c < cols; ++c) amax_zero = amax_zero && !(std::fabs(w.values[rr * cols + c]) > 0);
    if (amax_zero) continue;
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = rr * cols + c;
      const float v = gpu::e4m3_to_f32(got.q[i]) * got.scale[rr];
      ASSERT_TRUE(same_value(v, cpu[i])) << what << " " << name(w.sd) << ": [" << r << ", " << c << "] code x scale "
                                         << v << ", quantize_rows_e4m3 " << cpu[i];
    }
  }
}

class CudaFp8Quantize : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaFp8Quantize, EveryE4m3ValueTieAndNeighbourAtPowerOfTwoScales) {
  for (src_dtype sd : kSources) {
    // A row of 448 x 2^k has the scale 2^k exactly, so its elements divide back to the E4M3 values,
    // the midpoints between neighbours (ties) and the source values next to them. fp16 has the
    // smallest range: 448 x 2^7 < 65504, and 2^-10 x 2^-14 is its smallest subnormal.
    const std::vector<int> exps =
        sd == src_dtype::f16 ? std::vector<int>{0, -14, 7} : std::vector<int>{0, -24, 17, -100, 100};
    std::vector<std::vector<float>> rows;
    size_t cols = 0;
    for (int k : exps) {
      const float amax = std::ldexp(gpu::e4m3_max, k);
      std::vector<float> row = {amax, -amax, load_bits(sd, store_bits(sd, amax) - 1)};
      for (uint8_t code = 0; code < 0x7e; ++code) {
        const float lo = gpu::e4m3_to_f32(code), hi = gpu::e4m3_to_f32(uint8_t(code + 1));
        for (float v : {lo, (lo + hi) / 2}) {
          const float x = stored(sd, std::ldexp(v, k));
          const uint32_t b = store_bits(sd, x);
          std::vector<float> near = {x};
          if (b != 0) near.insert(near.end(), {load_bits(sd, b - 1), load_bits(sd, b + 1)});
          for (float y : near) row.insert(row.end(), {y, -y});
        }
      }
      cols = std::max(cols, row.size());
      rows.push_back(std::move(row));
    }
    weights w{sd, int(cols), {}, {}};
    for (auto& row : rows) w.add_row(std::move(row));
    expect_as_host(w, "ties");
  }
}

TEST_F(CudaFp8Quantize, RandomRowsWithZerosHugeAndTinyValues) {
  struct shape {
    int rows, cols;
  };
  for (src_dtype sd : kSources) {
    // Decimal exponents: the wide range, subnormal tiny values, and huge ones below the dtype's max.
    const bool f16 = sd == src_dtype::f16;
    const float wide = f16 ? 4.0f : 35.0f;
    const float tiny_lo = f16 ? -7.8f : -44.5f, tiny_hi = f16 ? -4.8f : -38.0f;
    const float huge_lo = f16 ? 3.5f : 36.0f, huge_hi = f16 ? 4.8f : 38.5f;
    for (const shape sh : {shape{64, 1000}, shape{9, 1}, shape{17, 33}, shape{24, 4103}}) {
      std::mt19937 rng(uint32_t(sh.rows * 7919 + sh.cols) ^ uint32_t(sd));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::uniform_real_distribution<float> ud(0.0f, 1.0f);
      const auto uniform = [&](float lo, float hi) { return lo + (hi - lo) * ud(rng); };
      const auto signed_pow10 = [&](float e) { return (ud(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, e); };
      weights w{sd, sh.cols, {}, {}};
      for (int r = 0; r < sh.rows; ++r) {
        std::vector<float> row(size_t(sh.cols), 0.0f);
        // Normal values of this scale stay below the dtype's max, and so does the outlier x 1e4.
        const float row_scale = std::pow(10.0f, r % 8 == 6 ? uniform(-wide, wide - 4.5f) : uniform(-wide, wide - 1.0f));
        for (float& v : row) {
          switch (r % 8) {
            case 0:  // normal values at one scale, one in eight zero, one in sixteen -0
              v = ud(rng) < 0.125f ? (ud(rng) < 0.5f ? 0.0f : -0.0f) : nd(rng) * row_scale;
              break;
            case 1: v = 0.0f; break;
            case 2: v = -0.0f; break;
            case 3: v = signed_pow10(uniform(-wide, wide)); break;  // huge and tiny in one row
            case 4: v = signed_pow10(uniform(tiny_lo, tiny_hi)); break;
            case 5: v = signed_pow10(uniform(huge_lo, huge_hi)); break;
            case 6: v = nd(rng) * row_scale; break;
            default: v = 0.0f; break;
          }
        }
        if (r % 8 == 6) row[size_t(r) % row.size()] *= 1e4f;   // an outlier
        if (r % 8 == 7) row[size_t(r) % row.size()] = nd(rng) * row_scale;   // one non-zero element
        w.add_row(std::move(row));
      }
      expect_as_host(w, "random " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols));
    }
  }
}

TEST_F(CudaFp8Quantize, LargestElementDividingPastE4m3MaxSaturates) {
  for (src_dtype sd : kSources) {
    // An amax a (exact in every source dtype) whose a / (a / 448) rounds to just above 448.
    float amax = 0;
    for (int i = 0; i < 128 && amax == 0; ++i) {
      const float a = 1.0f + float(i) / 128.0f;
      if (a / (a / gpu::e4m3_max) > gpu::e4m3_max) amax = a;
    }
    ASSERT_NE(amax, 0.0f);
    std::mt19937 rng(uint32_t(sd) + 5);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    weights w{sd, 40, {}, {}};
    for (int k : {0, 3, -3}) {
      std::vector<float> row = {std::ldexp(amax, k), -std::ldexp(amax, k)};
      for (int c = 2; c < w.cols; ++c) row.push_back(std::ldexp(amax * ud(rng), k));
      w.add_row(std::move(row));
    }
    expect_as_host(w, "saturation");
    const quantized got = on_device(w);
    for (int r = 0; r < w.rows(); ++r) {
      EXPECT_EQ(int(got.q[size_t(r) * size_t(w.cols)]), 0x7e) << name(sd) << " row " << r;
      EXPECT_EQ(int(got.q[size_t(r) * size_t(w.cols) + 1]), 0xfe) << name(sd) << " row " << r;
    }
  }
}

TEST_F(CudaFp8Quantize, InfinityAndNanAsTheHost) {
  const float inf = INFINITY, nan = NAN;
  weights w{src_dtype::f32, 6, {}, {}};
  w.add_row({1.0f, inf, 2.0f, -3.0f, 0.0f, -0.0f});   // scale infinity: finite / inf is +-0, inf / inf NaN
  w.add_row({nan, 1.0f, -2.0f, 3.0f, 1e-40f, 0.0f});  // NaN skipped by amax, its code NaN
  w.add_row({nan, nan, -nan, nan, nan, nan});          // amax 0: codes 0
  w.add_row({-inf, 5.0f, nan, 0.0f, -1e30f, 1e-30f});
  w.add_row({1e-45f, -1e-45f, 0.0f, 3e-45f, nan, 0.0f});   // the scale underflows to 0: x / 0
  expect_as_host(w, "non-finite");
}

}  // namespace
}  // namespace actorserve::testing
