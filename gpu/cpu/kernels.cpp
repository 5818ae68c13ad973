#include "gpu/cpu/kernels.hpp"

#include <cmath>
#include <cstring>

namespace actorserve::gpu::cpu {
namespace {

// NOTE: GCC vector extensions give SIMD dot products without -ffast-math (a scalar reduction
// loop is never vectorised under strict IEEE semantics). 8 lanes: two SSE registers, or one AVX.
// On x86-64 an AVX2 copy of the hot loops is chosen at run time where the CPU has it.
// NOTE: dispatch by a plain flag, not target_clones: an ifunc resolver runs before the
// ThreadSanitizer runtime is initialised and crashes TSan builds at load time.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8 __attribute__((vector_size(32)));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AS_AVX2_DISPATCH 1
#define AS_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define AS_AVX2_DISPATCH 0
#endif

__attribute__((always_inline)) inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline float hsum(v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/// A tile of 2 input rows x 4 weight rows: 8 dot products sharing their loads.
__attribute__((always_inline)) inline void tile_2x4(const float* x0, const float* x1, const float* w, size_t in, float* y0, float* y1) {
  const float* w0 = w;
  const float* w1 = w + in;
  const float* w2 = w + 2 * in;
  const float* w3 = w + 3 * in;
  v8 a00 = {}, a01 = {}, a02 = {}, a03 = {}, a10 = {}, a11 = {}, a12 = {}, a13 = {};
  size_t i = 0;
  for (; i + 8 <= in; i += 8) {
    const v8 xa = load8(x0 + i), xb = load8(x1 + i);
    const v8 b0 = load8(w0 + i), b1 = load8(w1 + i), b2 = load8(w2 + i), b3 = load8(w3 + i);
    a00 += xa * b0; a01 += xa * b1; a02 += xa * b2; a03 += xa * b3;
    a10 += xb * b0; a11 += xb * b1; a12 += xb * b2; a13 += xb * b3;
  }
  float s[8] = {hsum(a00), hsum(a01), hsum(a02), hsum(a03), hsum(a10), hsum(a11), hsum(a12), hsum(a13)};
  for (; i < in; ++i) {
    s[0] += x0[i] * w0[i]; s[1] += x0[i] * w1[i]; s[2] += x0[i] * w2[i]; s[3] += x0[i] * w3[i];
    s[4] += x1[i] * w0[i]; s[5] += x1[i] * w1[i]; s[6] += x1[i] * w2[i]; s[7] += x1[i] * w3[i];
  }
  for (int k = 0; k < 4; ++k) {
    y0[k] = s[k];
    y1[k] = s[4 + k];
  }
}

/// Output rows [o_begin, o_end) for all input rows.
__attribute__((always_inline)) inline float dot_impl(const float* a, const float* b, size_t n) {
  v8 acc0 = {}, acc1 = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += load8(a + i) * load8(b + i);
    acc1 += load8(a + i + 8) * load8(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += load8(a + i) * load8(b + i);
  float s = hsum(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

__attribute__((always_inline)) inline void axpy_impl(float* y, float a, const float* x, size_t n) {
  const v8 av = {a, a, a, a, a, a, a, a};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 yv = load8(y + i);
    yv += av * load8(x + i);
    std::memcpy(y + i, &yv, sizeof yv);
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

__attribute__((always_inline)) inline void matmul_rows_impl(const float* x, size_t rows, size_t in, const float* w, size_t out, const float* bias,
                 float* y, size_t o_begin, size_t o_end) {
  // Input rows in blocks so that a block of x stays in cache while weight rows stream past.
  constexpr size_t row_block = 32;
  for (size_t t0 = 0; t0 < rows; t0 += row_block) {
    const size_t t1 = std::min(rows, t0 + row_block);
    size_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
      size_t t = t0;
      float tmp[4];
      for (; t + 2 <= t1; t += 2)
        tile_2x4(x + t * in, x + (t + 1) * in, w + o * in, in, y + t * out + o, y + (t + 1) * out + o);
      if (t < t1) tile_2x4(x + t * in, x + t * in, w + o * in, in, y + t * out + o, tmp);
    }
    for (; o < o_end; ++o)
      for (size_t t = t0; t < t1; ++t) y[t * out + o] = dot_impl(x + t * in, w + o * in, in);
  }
  if (bias)
    for (size_t t = 0; t < rows; ++t)
      for (size_t o = o_begin; o < o_end; ++o) y[t * out + o] += bias[o];
}

void matmul_rows_generic(const float* x, size_t rows, size_t in, const float* w, size_t out, const float* bias,
                         float* y, size_t o_begin, size_t o_end) {
  matmul_rows_impl(x, rows, in, w, out, bias, y, o_begin, o_end);
}
float dot_generic(const float* a, const float* b, size_t n) { return dot_impl(a, b, n); }
void axpy_generic(float* y, float a, const float* x, size_t n) { axpy_impl(y, a, x, n); }

#if AS_AVX2_DISPATCH
AS_TARGET_AVX2 void matmul_rows_avx2(const float* x, size_t rows, size_t in, const float* w, size_t out,
                                     const float* bias, float* y, size_t o_begin, size_t o_end) {
  matmul_rows_impl(x, rows, in, w, out, bias, y, o_begin, o_end);
}
AS_TARGET_AVX2 float dot_avx2(const float* a, const float* b, size_t n) { return dot_impl(a, b, n); }
AS_TARGET_AVX2 void axpy_avx2(float* y, float a, const float* x, size_t n) { axpy_impl(y, a, x, n); }
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

void matmul_rows(const float* x, size_t rows, size_t in, const float* w, size_t out, const float* bias, float* y,
                 size_t o_begin, size_t o_end) {
#if AS_AVX2_DISPATCH
  if (cpu_has_avx2()) return matmul_rows_avx2(x, rows, in, w, out, bias, y, o_begin, o_end);
#endif
  matmul_rows_generic(x, rows, in, w, out, bias, y, o_begin, o_end);
}

}  // namespace

float dot(const float* a, const float* b, size_t n) {
#if AS_AVX2_DISPATCH
  if (cpu_has_avx2()) return dot_avx2(a, b, n);
#endif
  return dot_generic(a, b, n);
}

void matmul(thread_pool& pool, const float* x, size_t rows, size_t in, const float* w, size_t out,
            const float* bias, float* y) {
  // Chunks of 16 output rows (a multiple of the tile height) keep the tiles full.
  constexpr size_t grain = 16;
  const size_t chunks = (out + grain - 1) / grain;
  pool.parallel_for(chunks, [&](size_t c0, size_t c1) {
    matmul_rows(x, rows, in, w, out, bias, y, c0 * grain, std::min(out, c1 * grain));
  });
}

void rms_norm(const float* x, const float* weight, size_t rows, size_t n, float eps, float* out) {
  for (size_t t = 0; t < rows; ++t) {
    const float* xr = x + t * n;
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float var = static_cast<float>(ss / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(var + eps);
    float* o = out + t * n;
    for (size_t i = 0; i < n; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void silu_mul(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_mlp(thread_pool& pool, const float* x, size_t rows, size_t in, const float* gate_w, const float* up_w,
                const float* down_w, size_t inter, float* gate, float* up, float* y) {
  matmul(pool, x, rows, in, gate_w, inter, nullptr, gate);
  matmul(pool, x, rows, in, up_w, inter, nullptr, up);
  silu_mul(gate, up, rows * inter);
  matmul(pool, gate, rows, inter, down_w, in, nullptr, y);
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void axpy(float* y, float a, const float* x, size_t n) {
#if AS_AVX2_DISPATCH
  if (cpu_has_avx2()) return axpy_avx2(y, a, x, n);
#endif
  axpy_generic(y, a, x, n);
}

}  // namespace actorserve::gpu::cpu
