#pragma once
// K/V tiles of the FP8 KV cache (--kv-cache-dtype fp8): the paged cache holds one E4M3 byte per
// element, [num_blocks, block_size, KVH, D] like the 16-bit cache. Tiles come into shared memory
// as bytes (rows of D bytes, 16 elements per 16-byte copy) and are converted there to the
// activation dtype in the swizzled row layout the MMAs read (row_tile). The conversion is exact:
// every E4M3 value is a bf16 and an fp16 value. The per-layer scales are not applied here: the
// kernels fold k_scale into the queries' softmax scale and multiply the output by v_scale.
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "gpu/cuda/attention/tile_ops.cuh"

namespace actorserve::gpu::cuda::attn_dev {

/// Issues the cp.async copies of the E4M3 K and V rows [k0, k0 + N) of one KV head into byte
/// tiles [N][D] (rows past kv_end are zero-filled, and a zero byte is +0), `NT` threads sharing
/// the work, `tid` this thread's index.
template <int D, int N, int NT>
__device__ __forceinline__ void load_kv_tile_fp8(const uint8_t* kc, const uint8_t* vc, const int32_t* bt, int bs,
                                                 int kvh, int kvh_count, int k0, int kv_end, uint32_t k_s,
                                                 uint32_t v_s, int tid) {
  constexpr int kChunks = D / 16;
  static_assert((N * kChunks) % NT == 0, "tile copy must divide evenly");
#pragma unroll
  for (int i = 0; i < N * kChunks / NT; ++i) {
    const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
    const int kpos = k0 + r;
    const bool ok = kpos < kv_end;
    const size_t off = ok ? kv_row(bt, kpos, bs, kvh, kvh_count, D) + c * 16 : 0;
    const uint32_t dst = uint32_t(r * D + c * 16);
    cp_async16(k_s + dst, kc + off, ok ? 16 : 0);
    cp_async16(v_s + dst, vc + off, ok ? 16 : 0);
  }
}

/// Eight E4M3 values (low byte first) as eight T values packed in 16 bytes, exactly.
template <class T>
__device__ __forceinline__ uint4 e4m3x8_to(uint2 raw) {
  const uint32_t w[2] = {raw.x, raw.y};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((w[i / 2] >> (16 * (i % 2))) & 0xffffu), __NV_E4M3);
    if constexpr (std::is_same_v<T, __half>) {
      out[i] = uint32_t(h.x) | (uint32_t(h.y) << 16);
    } else {
      const float2 f = __half22float2(__half2(h));
      out[i] = elem<T>::pack(f.x, f.y);  // exact: an E4M3 value is a bf16 value
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

/// One warp converts `rows` rows (from row r0) of a byte tile [*][D] at `src` into the swizzled
/// 16-bit tile of `rows` rows at `dst` (row_tile<D>, row 0 = source row r0).
template <class T, int D, int rows>
__device__ __forceinline__ void convert_rows_fp8(uint32_t src, int r0, uint32_t dst, int lane) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a 16-bit row
#pragma unroll
  for (int i = 0; i < rows * kChunks / 32; ++i) {
    const int idx = i * 32 + lane, r = idx / kChunks, c = idx % kChunks;
    uint2 raw;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(raw.x), "=r"(raw.y)
                 : "r"(src + uint32_t((r0 + r) * D + c * 8))
                 : "memory");
    const uint4 v = e4m3x8_to<T>(raw);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + swz<D>(r, c)), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  }
}

}  // namespace actorserve::gpu::cuda::attn_dev
