#pragma once
// K/V tiles of the FP8 KV cache (--kv-cache-dtype fp8): the paged cache holds one E4M3 byte per
// element, [num_blocks, block_size, KVH, D] like the 16-bit cache. load_kv_tile<..., uint8_t>
// (tile_ops.cuh) copies them as byte tiles, rows of D bytes swizzled as swizzled<D>. The decode
// kernel converts the bytes in registers (warp_keys.cuh, e4m3_tile); the prefill kernel converts
// a landed tile into the 16-bit row_tile its MMAs read (convert_rows_fp8). Every E4M3 value is a
// bf16 and an fp16 value, so both conversions are exact. The per-layer scales are not applied
// here: the kernels fold k_scale into the queries' softmax scale and multiply the output by v_scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gpu/cuda/attention/tile_ops.cuh"

namespace actorserve::gpu::cuda::attn_dev {

/// The layout tag of a byte tile of E4M3 K/V rows (swizzled<D>) for warp_keys.
template <int D>
struct e4m3_tile {};

/// The four E4M3 codes of `x` (code i in byte i) as T values, exactly: `even` holds codes 0 and
/// 2, `odd` codes 1 and 3 (the lower code in the low half). Integer operations place each code's
/// sign at bit 15 of a 16-bit half and its exponent and mantissa bits at T's exponent / mantissa
/// boundary, which reads as the value times 2^(7 - bias of T) (subnormal codes as subnormal T
/// values); one multiply by 2^(bias - 7) makes it exact. NOTE: the NaN codes (0x7f, 0xff: only a
/// NaN activation writes one) read as +-480, the next value after 448.
template <class T>
__device__ __forceinline__ void e4m3x4_to(uint32_t x, uint32_t& even, uint32_t& odd) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "bf16 or fp16");
  constexpr int kShift = kBf16 ? 4 : 1;  // T's exponent bits - E4M3's 4
  const uint32_t hi = x, lo = x << 8;    // codes 1, 3 (and 0, 2) in the top byte of each half
  odd = (hi & 0x80008000u) | ((hi & 0x7f007f00u) >> kShift);
  even = (lo & 0x80008000u) | ((lo & 0x7f007f00u) >> kShift);
  if constexpr (kBf16) {
    // x 2^(127 - 7) = 0x7b80 as bf16; fma with -0 (not mul.bf16x2: sm_90 only) keeps -0 and is exact.
    asm("fma.rn.bf16x2 %0, %0, %1, %2;\n" : "+r"(even) : "r"(0x7b807b80u), "r"(0x80008000u));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;\n" : "+r"(odd) : "r"(0x7b807b80u), "r"(0x80008000u));
  } else {
    // x 2^(15 - 7) = 0x5c00 as fp16.
    asm("mul.rn.f16x2 %0, %0, %1;\n" : "+r"(even) : "r"(0x5c005c00u));
    asm("mul.rn.f16x2 %0, %0, %1;\n" : "+r"(odd) : "r"(0x5c005c00u));
  }
}

/// One warp converts `rows` rows (from row r0) of a byte tile [*][D] (swizzled<D>, as
/// load_kv_tile copies it) at `src` into the swizzled 16-bit tile of `rows` rows at `dst`
/// (row_tile<D>, row 0 = source row r0): 8 codes (half a 16-byte chunk) per lane and step.
template <class T, int D, int rows>
__device__ __forceinline__ void convert_rows_fp8(uint32_t src, int r0, uint32_t dst, int lane) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a 16-bit row, 8-byte halves of a byte chunk
#pragma unroll
  for (int i = 0; i < rows * kChunks / 32; ++i) {
    const int idx = i * 32 + lane, r = idx / kChunks, c = idx % kChunks;
    uint2 raw;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(raw.x), "=r"(raw.y)
                 : "r"(src + swizzled<D>(r0 + r, c / 2) + (c % 2) * 8)
                 : "memory");
    uint32_t e0, o0, e1, o1;  // codes (0, 2), (1, 3) of each word
    e4m3x4_to<T>(raw.x, e0, o0);
    e4m3x4_to<T>(raw.y, e1, o1);
    st_shared16(dst + swz<D>(r, c), make_uint4(__byte_perm(e0, o0, 0x5410), __byte_perm(e0, o0, 0x7632),
                                               __byte_perm(e1, o1, 0x5410), __byte_perm(e1, o1, 0x7632)));
  }
}

}  // namespace actorserve::gpu::cuda::attn_dev
