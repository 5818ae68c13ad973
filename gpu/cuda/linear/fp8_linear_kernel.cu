// FP8 E4M3 weights with per-row or 128 x 128 block scales (fp8_linear.hpp). The GEMV is the
// dense GEMV's main loop (gemv_common.cuh) over 16 weights per 16-byte load, converted pairwise to
// fp16 (exact: every E4M3 value is an fp16 value) and then to fp32; each row's fp32 dot product
// takes the row's scale once, or each load's fp32 partial sum takes its block's scale. The
// quantizer (--quantization fp8) works on the fp32 bits with integer arithmetic and one explicit
// IEEE division, so that no floating-point compiler flag (-ftz, -prec-div, --use_fast_math)
// changes its codes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda/fp8_code.cuh"
#include "gpu/cuda/linear/fp8_gemv.cuh"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/linear/gemv_common.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;
using dev::fp8::amax8;
using dev::fp8::e4m3_weights;
using dev::fp8::f32_bits;
using dev::fp8::kRows;

/// The block scales of kRows weight rows (fp8_scale_mode::block128): each 16-weight chunk c of
/// row r lies in the 128-wide block c / 8 of its row's scale row.
struct block128_chunks {
  static constexpr bool kScaled = true;
  const float* row[kRows];
  __device__ __forceinline__ float of(int r, int c) const { return __ldg(row[r] + (c >> 3)); }
};

/// kRows weight rows per block against m (<= M) activation rows. per_row: the row's scale
/// applies once to its sum; block128: each chunk's partial sum takes its block's scale.
template <class T, int M, fp8_scale_mode Mode>
__global__ void __launch_bounds__(kThreads) fp8_gemv_kernel(const T* x, int m, int k, const uint8_t* q,
                                                             const float* scale, int n, float* y, float beta) {
  __shared__ partials<M, kRows> red;
  const int row0 = blockIdx.x * kRows;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wp[r] = reinterpret_cast<const uint4*>(q + size_t(min(row0 + r, n - 1)) * k);
  if constexpr (Mode == fp8_scale_mode::block128) {
    block128_chunks chunks;
#pragma unroll
    for (int r = 0; r < kRows; ++r) chunks.row[r] = dev::fp8::block128_scale_row(scale, min(row0 + r, n - 1), k);
    accumulate<T, M, kRows, no_hook, e4m3_weights>(x, m, k, wp, red, no_hook{}, chunks);
  } else {
    accumulate<T, M, kRows, no_hook, e4m3_weights>(x, m, k, wp, red);
  }
  for (int t = threadIdx.x; t < kRows * M; t += kThreads) {
    const int r = t / M, i = t % M, row = row0 + r;
    if (i >= m || row >= n) continue;
    dev::fp8::store_row<Mode>(y + size_t(i) * n + row, red.total(r, i), scale, row, beta);
  }
}

template <class T, int M, fp8_scale_mode Mode>
void launch_fp8(const T* x, int m, int k, const uint8_t* q, const float* scale, int n, float* y, float beta,
                cudaStream_t s) {
  fp8_gemv_kernel<T, M, Mode><<<(n + kRows - 1) / kRows, kThreads, 0, s>>>(x, m, k, q, scale, n, y, beta);
}

/// One thread per 4 weights of a row (k % 4 == 0) or per weight (any k); a group of 4 never
/// crosses a 128-wide block.
template <class T, int kPer, fp8_scale_mode Mode>
__global__ void fp8_dequantize_kernel(const uint8_t* q, const float* scale, int n, int k, T* out) {
  const size_t groups = size_t(n) * (k / kPer);
  const size_t blocks_per_row = fp8_blocks(size_t(k));
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const size_t i = g * kPer, row = i / k;
    const float s = Mode == fp8_scale_mode::block128
                        ? scale[(row / kFp8Block) * blocks_per_row + (i - row * k) / kFp8Block]
                        : scale[row];
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(q[i + e], __NV_E4M3);
      out[i + e] = from_f32<T>(__half2float(__half(h)) * s);
    }
  }
}

inline constexpr int kQuantWarps = 8;  // rows per block of the quantizer

/// One warp per row: the row's amax over the |x| bits (for non-NaN floats their order is the
/// order of the values), then each element's code of x / scale.
template <class T>
__global__ void __launch_bounds__(kQuantWarps * 32) fp8_quantize_rows_kernel(const T* w, int rows, int cols,
                                                                              uint8_t* q, float* scale) {
  const int row = blockIdx.x * kQuantWarps + int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  if (row >= rows) return;  // the whole warp
  const T* src = w + size_t(row) * cols;
  uint32_t amax = 0;
  for (int c = lane; c < cols; c += 32) {
    const uint32_t a = f32_bits(src[c]) & 0x7fffffffu;
    if (a <= 0x7f800000u) amax = max(amax, a);
  }
  amax = __reduce_max_sync(0xffffffffu, amax);
  const float s = div_rn_ieee(__uint_as_float(amax), 448.0f);
  if (lane == 0) scale[row] = s;
  uint8_t* out = q + size_t(row) * cols;
  for (int c = lane; c < cols; c += 32)
    out[c] = amax == 0 ? 0 : e4m3_code(__float_as_uint(div_rn_ieee(__uint_as_float(f32_bits(src[c])), s)));
}

template <class T>
void launch_quantize(const void* src, int rows, int cols, uint8_t* q, float* scale, cudaStream_t s) {
  fp8_quantize_rows_kernel<T><<<(rows + kQuantWarps - 1) / kQuantWarps, kQuantWarps * 32, 0, s>>>(
      static_cast<const T*>(src), rows, cols, q, scale);
}

inline constexpr int kActThreads = 128;  // threads per activation row of the per-token quantizer

/// The codes of x / s of the 8 elements of a 16-byte load (zeros where the amax is 0).
template <class T>
__device__ __forceinline__ uint2 encode8(const uint4& raw, uint32_t amax, float s) {
  const T* e = reinterpret_cast<const T*>(&raw);
  uint32_t word[2] = {0, 0};
  if (amax != 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      word[i / 4] |= uint32_t(e4m3_code(__float_as_uint(div_rn_ieee(__uint_as_float(f32_bits(e[i])), s))))
                     << (8 * (i % 4));
  }
  return make_uint2(word[0], word[1]);
}

/// The activation quantizer: one block per activation row, 8 elements per 16-byte load; each
/// element's code of x / scale, rounded as fp8_quantize_rows_kernel rounds a weight row.
/// per_token: the row's amax over the |x| bits (NaN skipped) gives its one scale (the row is read
/// twice, the second time from L1/L2). per_group (fp8_act_scales::per_128): each 128-element
/// group's amax gives its scale, written to scale[group * stride + row]; the 16 loads of a group
/// are the 16 lanes of a half-warp, so the group's amax is a shuffle reduction and each thread
/// encodes the load it read.
template <class T, fp8_act_scales Mode>
__global__ void __launch_bounds__(kActThreads) fp8_quantize_act_kernel(const T* x, int k, uint8_t* q, float* scale,
                                                                       int stride) {
  const int row = blockIdx.x, chunks = k / 8;
  const uint4* src = reinterpret_cast<const uint4*>(x + size_t(row) * k);
  uint2* out = reinterpret_cast<uint2*>(q + size_t(row) * k);
  if constexpr (Mode == fp8_act_scales::per_128) {
    constexpr int kLoadsPerGroup = kFp8Block / 8;  // 16: half a warp
    // Every lane of a warp takes each round (the shuffles need the whole warp); loads past the
    // row read nothing and count as zeros.
    for (int c0 = 0; c0 < chunks; c0 += kActThreads) {
      const int c = c0 + int(threadIdx.x);
      const uint4 raw = c < chunks ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
      uint32_t amax = amax8<T>(raw, 0);
#pragma unroll
      for (int off = kLoadsPerGroup / 2; off > 0; off /= 2) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const float s = div_rn_ieee(__uint_as_float(amax), 448.0f);
      if (c >= chunks) continue;
      if (c % kLoadsPerGroup == 0) scale[size_t(c / kLoadsPerGroup) * stride + row] = s;
      out[c] = encode8<T>(raw, amax, s);
    }
  } else {
    __shared__ uint32_t warp_max[kActThreads / 32];
    uint32_t amax = 0;
    for (int c = threadIdx.x; c < chunks; c += kActThreads) amax = amax8<T>(__ldg(src + c), amax);
    amax = __reduce_max_sync(0xffffffffu, amax);
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kActThreads / 32; ++w) amax = max(amax, warp_max[w]);
    const float s = div_rn_ieee(__uint_as_float(amax), 448.0f);
    if (threadIdx.x == 0) scale[row] = s;
    for (int c = threadIdx.x; c < chunks; c += kActThreads) out[c] = encode8<T>(__ldg(src + c), amax, s);
  }
}

}  // namespace

bool fp8_gemv_supported(const void* x, int m, int k, const void* q) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return m >= 1 && m <= fp8_gemv_max_m && k > 0 && k % 16 == 0 && aligned(x) && aligned(q);
}

int fp8_gemv(act_dtype dt, const void* x, int m, int k, const uint8_t* q, const float* scale, int n, float* y,
             float beta, cudaStream_t s, fp8_scale_mode mode) {
  if (n <= 0) return 0;
  AS_DISPATCH_ACT(dt, {
    const T* xt = static_cast<const T*>(x);
    const auto launch = [&](auto mode_tag) {
      constexpr fp8_scale_mode kMode = decltype(mode_tag)::value;
      if (m == 1) launch_fp8<T, 1, kMode>(xt, m, k, q, scale, n, y, beta, s);
      else if (m == 2) launch_fp8<T, 2, kMode>(xt, m, k, q, scale, n, y, beta, s);
      else if (m <= 4) launch_fp8<T, 4, kMode>(xt, m, k, q, scale, n, y, beta, s);
      else launch_fp8<T, 8, kMode>(xt, m, k, q, scale, n, y, beta, s);
    };
    if (mode == fp8_scale_mode::block128)
      launch(std::integral_constant<fp8_scale_mode, fp8_scale_mode::block128>{});
    else
      launch(std::integral_constant<fp8_scale_mode, fp8_scale_mode::per_row>{});
  });
  return cudaGetLastError();
}

int fp8_dequantize(act_dtype dt, const uint8_t* q, const float* scale, int n, int k, void* out, cudaStream_t s,
                   fp8_scale_mode mode) {
  if (n <= 0 || k <= 0) return 0;
  constexpr int kBlock = 256;
  const size_t per = k % 4 == 0 ? 4 : 1;
  const size_t groups = size_t(n) * k / per;
  const int blocks = int(std::min<size_t>((groups + kBlock - 1) / kBlock, 65535));
  AS_DISPATCH_ACT(dt, {
    T* o = static_cast<T*>(out);
    constexpr auto kRow = fp8_scale_mode::per_row;
    constexpr auto kBlk = fp8_scale_mode::block128;
    if (mode == kBlk && per == 4) fp8_dequantize_kernel<T, 4, kBlk><<<blocks, kBlock, 0, s>>>(q, scale, n, k, o);
    else if (mode == kBlk) fp8_dequantize_kernel<T, 1, kBlk><<<blocks, kBlock, 0, s>>>(q, scale, n, k, o);
    else if (per == 4) fp8_dequantize_kernel<T, 4, kRow><<<blocks, kBlock, 0, s>>>(q, scale, n, k, o);
    else fp8_dequantize_kernel<T, 1, kRow><<<blocks, kBlock, 0, s>>>(q, scale, n, k, o);
  });
  return cudaGetLastError();
}

bool fp8_quantize_activations_supported(const void* x, int k) {
  return k > 0 && k % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
}

int fp8_quantize_activations(act_dtype dt, const void* x, int m, int k, uint8_t* q, float* scale, cudaStream_t s,
                             fp8_act_scales mode, int stride) {
  if (m <= 0) return 0;
  AS_DISPATCH_ACT(dt, {
    const T* xt = static_cast<const T*>(x);
    if (mode == fp8_act_scales::per_128)
      fp8_quantize_act_kernel<T, fp8_act_scales::per_128><<<m, kActThreads, 0, s>>>(xt, k, q, scale, stride);
    else
      fp8_quantize_act_kernel<T, fp8_act_scales::per_token><<<m, kActThreads, 0, s>>>(xt, k, q, scale, stride);
  });
  return cudaGetLastError();
}

int fp8_quantize_rows(const void* src, src_dtype sd, int rows, int cols, uint8_t* q, float* scale, cudaStream_t s) {
  if (rows <= 0) return 0;
  switch (sd) {
    case src_dtype::f32: launch_quantize<float>(src, rows, cols, q, scale, s); break;
    case src_dtype::bf16: launch_quantize<__nv_bfloat16>(src, rows, cols, q, scale, s); break;
    case src_dtype::f16: launch_quantize<__half>(src, rows, cols, q, scale, s); break;
  }
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
