#pragma once
// Device building blocks of the Hopper (sm_90a) prefill kernel, prefill_wgmma_kernel.cu:
// warpgroup MMAs (wgmma.mma_async) on shared-memory operands described by 128-byte-swizzled
// matrix descriptors, mbarriers, and the copies that put paged K/V rows and fp32 queries into
// that swizzled layout.
//
// Shared-memory tiles here are [D / 64][rows][64 elements]: each 64-element column slab of a
// row is one 128-byte line, lines of a slab follow each other, and 16-byte chunk c of row r
// sits at chunk c ^ (r & 7) (the hardware's 128-byte swizzle; slabs are 1024-byte aligned).
// The same tile is K-major for Q and K (S = Q K^T) and MN-major for V (O += P V).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/mbarrier.cuh"

namespace actorserve::gpu::cuda::attn_dev::wg {

/// wgmma shared-memory matrix descriptor with the 128-byte swizzle (byte offsets, 16-aligned).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
         (uint64_t(1) << 62);
}

/// K-major operand (Q or K tile of `rows` rows) at reduction step `ks` (16 elements): the
/// slab is ks / 4, the 32-byte step inside the 128-byte line ks % 4; 8-row groups 1024 B apart.
template <int rows>
__device__ __forceinline__ uint64_t desc_k_major(uint32_t tile, int ks) {
  return sw128_desc(tile + (ks >> 2) * (rows * 128) + (ks & 3) * 32, 16, 1024);
}

/// MN-major operand (the V tile of `rows` keys, N = head dim) at keys [16 kk, 16 kk + 16):
/// 64-element slabs `rows * 128` bytes apart (LBO), 8-key groups 1024 B apart (SBO).
template <int rows>
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t tile, int kk) {
  return sw128_desc(tile + kk * 16 * 128, rows * 128, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Orders this thread's generic-proxy shared-memory writes before async-proxy (wgmma) reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Keeps the compiler from moving accesses of `r` across the asynchronous MMA's issue and wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

using dev::fence_mbarrier_init;
using dev::mbar_arrive;
using dev::mbar_arrive_cp_async;
using dev::mbar_arrive_expect_tx;
using dev::mbar_init;
using dev::mbar_wait;
using dev::tma_load_2d;
/// Barrier among the `threads` threads (whole warps) that name barrier `id` (0 is __syncthreads).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Arrives at named barrier `id` (of `threads` threads) without waiting for it.
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Lowers this warpgroup's registers per thread to N (a producer handing registers back).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
/// Raises this warpgroup's registers per thread to N (consumers taking the producer's).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/// wgmma instructions of one 16-bit input type, fp32 accumulators. Accumulator i of a thread
/// (warp w of the warpgroup, lane l) is row 16 w + l / 4 + 8 ((i / 2) % 2), column
/// 8 (i / 4) + 2 (l % 4) + i % 2: mma.sync's C layout repeated over the N / 8 column blocks.
template <class T>
struct wgmma_ops;
// The wgmma wrappers of one 16-bit input type (bf16 and fp16 differ only in the PTX type name
// TY). Accumulators d[0..N/2) take constraint C: "=f" (written only) for the _first forms,
// whose scale-d 0 ignores D's old values, "+f" (read and written) for the others.
#define AS_WG_ACC8(C, i) \
  C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define AS_WG_ACC16(C) AS_WG_ACC8(C, 0), AS_WG_ACC8(C, 8)
#define AS_WG_ACC32(C) AS_WG_ACC16(C), AS_WG_ACC8(C, 16), AS_WG_ACC8(C, 24)
#define AS_WG_ACC64(C) AS_WG_ACC32(C), AS_WG_ACC8(C, 32), AS_WG_ACC8(C, 40), AS_WG_ACC8(C, 48), AS_WG_ACC8(C, 56)
#define AS_WG_R16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define AS_WG_R32 AS_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define AS_WG_R64 \
  AS_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
/* D[64 x N] (+)= A (shared, K-major) * B (shared, K-major); REGS / ACC list the N / 2 accumulator
   operands, PA, PB, PP the operand numbers of the two descriptors and of scale-d. */
#define AS_WG_SS(NAME, TY, C, SCALE_D, N, REGS, ACC, PA, PB, PP)                                 \
  __device__ static __forceinline__ void NAME(float* d, uint64_t da, uint64_t db) {            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #PP ", 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, "   \
                 "%" #PA ", %" #PB ", p, 1, 1, 0, 0;\n}\n"                                       \
                 : ACC(C)                                                                      \
                 : "l"(da), "l"(db), "r"(SCALE_D));                                            \
  }
#define AS_WG_SS_N32(NAME, TY, C, SCALE_D) AS_WG_SS(NAME, TY, C, SCALE_D, 32, AS_WG_R16, AS_WG_ACC16, 16, 17, 18)
#define AS_WG_SS_N64(NAME, TY, C, SCALE_D) AS_WG_SS(NAME, TY, C, SCALE_D, 64, AS_WG_R32, AS_WG_ACC32, 32, 33, 34)
#define AS_WG_SS_N128(NAME, TY, C, SCALE_D) AS_WG_SS(NAME, TY, C, SCALE_D, 128, AS_WG_R64, AS_WG_ACC64, 64, 65, 66)
/* D[64 x 64] += A (registers) * B (shared, MN-major). */
#define AS_WG_RS_T_N64(TY)                                                                     \
  __device__ static __forceinline__ void rs_t_n64(float* d, const uint32_t* a, uint64_t db) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                   \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" AS_WG_R32 "}, "  \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                  \
                 : AS_WG_ACC32("+f")                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));               \
  }
/* D[64 x 128] += A (registers) * B (shared, MN-major). */
#define AS_WG_RS_T_N128(TY)                                                                    \
  __device__ static __forceinline__ void rs_t_n128(float* d, const uint32_t* a, uint64_t db) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                   \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" AS_WG_R64 "}, " \
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                  \
                 : AS_WG_ACC64("+f")                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));               \
  }
#define AS_WG_OPS(TY)                     \
  AS_WG_SS_N32(ss_n32_first, TY, "=f", 0) \
  AS_WG_SS_N32(ss_n32, TY, "+f", 1)       \
  AS_WG_SS_N64(ss_n64_first, TY, "=f", 0) \
  AS_WG_SS_N64(ss_n64, TY, "+f", 1)       \
  AS_WG_SS_N128(ss_n128_first, TY, "=f", 0) \
  AS_WG_SS_N128(ss_n128, TY, "+f", 1)     \
  AS_WG_RS_T_N64(TY)                      \
  AS_WG_RS_T_N128(TY)

template <>
struct wgmma_ops<__nv_bfloat16> {
  AS_WG_OPS("bf16")
};
template <>
struct wgmma_ops<__half> {
  AS_WG_OPS("f16")
};
#undef AS_WG_OPS
#undef AS_WG_RS_T_N128
#undef AS_WG_RS_T_N64
#undef AS_WG_SS_N128
#undef AS_WG_SS_N64
#undef AS_WG_SS_N32
#undef AS_WG_SS
#undef AS_WG_R64
#undef AS_WG_R32
#undef AS_WG_R16
#undef AS_WG_ACC64
#undef AS_WG_ACC32
#undef AS_WG_ACC16
#undef AS_WG_ACC8

/// Issues the cp.async copies of K and V rows [k0, k0 + N) of KV head `kvh` into swizzled
/// [D / 64][N][64] tiles (rows past kv_end zero-filled), `NT` threads sharing the work.
template <int D, int N, int NT>
__device__ __forceinline__ void load_kv(const uint16_t* kc, const uint16_t* vc, const int32_t* bt, int bs, int kvh,
                                        int kvh_count, int k0, int kv_end, uint32_t k_s, uint32_t v_s, int tid) {
  constexpr int kChunks = D / 8;
  static_assert((N * kChunks) % NT == 0, "tile copy must divide evenly");
  const int row_stride = kvh_count * D;
  if (bs % N == 0 && k0 % N == 0) {
    // The N rows lie in one block: one block-table read, then row r is r * KVH * D further.
    const size_t row0 = (size_t(__ldg(bt + k0 / bs)) * bs + k0 % bs) * row_stride + size_t(kvh) * D;
    const uint16_t* kb = kc + row0;
    const uint16_t* vb = vc + row0;
#pragma unroll 8
    for (int i = 0; i < N * kChunks / NT; ++i) {
      const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
      const bool ok = k0 + r < kv_end;
      const int off = ok ? r * row_stride + c * 8 : 0;
      cp_async16(k_s + sw128<N>(r, c), kb + off, ok ? 16 : 0);
      cp_async16(v_s + sw128<N>(r, c), vb + off, ok ? 16 : 0);
    }
    return;
  }
#pragma unroll 8
  for (int i = 0; i < N * kChunks / NT; ++i) {
    const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
    const int kpos = k0 + r;
    const bool ok = kpos < kv_end;
    const size_t off = ok ? kv_row(bt, kpos, bs, kvh, kvh_count, D) + c * 8 : 0;
    cp_async16(k_s + sw128<N>(r, c), kc + off, ok ? 16 : 0);
    cp_async16(v_s + sw128<N>(r, c), vc + off, ok ? 16 : 0);
  }
}

/// Issues the cp.async copies of rows [k0, k0 + N) of one cache (K or V) of KV head `kvh` into
/// a swizzled [D / 64][N][64] tile (rows past kv_end zero-filled), `NT` threads sharing the
/// work. Where blocks and k0 are multiples of 64 rows (of N when N < 64), each 64-row segment
/// lies in one block: one block-table read per segment.
template <int D, int N, int NT>
__device__ __forceinline__ void load_rows(const uint16_t* cache, const int32_t* bt, int bs, int kvh, int kvh_count,
                                          int k0, int kv_end, uint32_t dst, int tid) {
  constexpr int kChunks = D / 8, kSeg = N < 64 ? N : 64, kPerSeg = kSeg * kChunks / NT;
  static_assert((kSeg * kChunks) % NT == 0 && N % kSeg == 0, "tile copy must divide evenly");
  const int row_stride = kvh_count * D;
  if (bs % kSeg == 0 && k0 % kSeg == 0) {
#pragma unroll
    for (int g = 0; g < N / kSeg; ++g) {
      const int kg = k0 + g * kSeg;
      const int32_t blk = kg < kv_end ? __ldg(bt + kg / bs) : 0;
      const uint16_t* src = cache + (size_t(blk) * bs + kg % bs) * row_stride + size_t(kvh) * D;
#pragma unroll 4
      for (int i = 0; i < kPerSeg; ++i) {
        const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
        const bool ok = kg + r < kv_end;
        cp_async16(dst + sw128<N>(g * kSeg + r, c), src + (ok ? r * row_stride + c * 8 : 0), ok ? 16 : 0);
      }
    }
    return;
  }
#pragma unroll 8
  for (int i = 0; i < N * kChunks / NT; ++i) {
    const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
    const int kpos = k0 + r;
    const bool ok = kpos < kv_end;
    const size_t off = ok ? kv_row(bt, kpos, bs, kvh, kvh_count, D) + c * 8 : 0;
    cp_async16(dst + sw128<N>(r, c), cache + off, ok ? 16 : 0);
  }
}

/// Writes query rows [row0, row0 + 64) of an item as T into a swizzled [D / 64][64][64] tile,
/// scaled so scores come out in log2 units; item row r is token q_begin + r / G, head
/// kv_head * G + r % G, rows >= valid are zeros. `NT` threads share the work.
template <class T, int D, int NT>
__device__ __forceinline__ void stage_q_sw128(const attn_launch& a, int q_begin, int kv_head, int valid, uint32_t q_s,
                                              int tid, int row0 = 0) {
  const float sc = a.scale * 1.4426950408889634f;
  for (int idx = tid; idx < 64 * (D / 8); idx += NT) {
    const int r = idx / (D / 8), c = idx % (D / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < valid) {
      const float4* src = q_src(a, q_begin, kv_head, row0 + r, c, D);
      v = pack8<T>(__ldg(src), __ldg(src + 1), sc);
    }
    st_shared16(q_s + sw128<64>(r, c), v);
  }
}

/// stage_q_sw128 from attn_launch::q16 (already 16-bit and scaled): 16-byte cp.async copies
/// with zero fill past `valid`, so every chunk is in flight at once. The caller completes them
/// (cp.async.mbarrier.arrive or cp.async.wait_all) and the readers fence the async proxy.
template <class T, int D, int NT>
__device__ __forceinline__ void copy_q16_sw128(const attn_launch& a, int q_begin, int kv_head, int valid, uint32_t q_s,
                                               int tid, int row0 = 0) {
  const int G = a.num_heads / a.num_kv_heads;
  const T* q16 = static_cast<const T*>(a.q16);
  for (int idx = tid; idx < 64 * (D / 8); idx += NT) {
    const int r = idx / (D / 8), c = idx % (D / 8), row = row0 + r;
    const bool ok = row < valid;
    const T* src = ok ? q16 + (size_t(q_begin + row / G) * a.num_heads + kv_head * G + row % G) * D + c * 8 : q16;
    cp_async16(q_s + sw128<64>(r, c), src, ok ? 16 : 0);
  }
}

}  // namespace actorserve::gpu::cuda::attn_dev::wg
