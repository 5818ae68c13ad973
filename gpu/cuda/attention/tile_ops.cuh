#pragma once
// Device building blocks of the tensor-core attention kernels (sm_80+ instructions: cp.async,
// ldmatrix, mma.sync m16n8k16 with fp32 accumulation): 16-byte asynchronous copies of K/V rows
// from the paged cache into XOR-swizzled shared memory, and one warp's 16-query-row tile with
// its online softmax in exp2 units.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gpu/cuda/attention/launch.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda::attn_dev {

/// 2^x by the MUFU instruction alone (denormal results flush to 0; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// The online-softmax rescale of one thread's two accumulator rows (mma C layout: 4 lanes per
/// row) once `mx` holds the maxima of the running maxima `m` and the thread's new scores:
/// reduces `mx` over the row's lanes, sets `base` (0 for a fully masked row, whose p stay 0) and
/// `corr` = 2^(m - base) for the old sums and outputs, and moves `m` to the new maxima.
__device__ __forceinline__ void online_softmax_rescale(float (&mx)[2], float (&m)[2], float (&base)[2],
                                                       float (&corr)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    base[h] = mx[h] == -INFINITY ? 0.0f : mx[h];
    corr[h] = fast_exp2(m[h] - base[h]);
    m[h] = mx[h];
  }
}

/// Shared-memory address of a pointer (for cp.async / ldmatrix).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared, bypassing L1; `bytes` < 16 zero-fills the rest (0: all zeros).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile of rows of kRowBytes bytes
/// (a multiple of 16 from 64 up): the chunk index is XORed with the row's position among the 8
/// rows (rows of 128 bytes and more) or of the 8 row-pieces (64-byte rows, two per 128-byte line)
/// that an 8-row ldmatrix or a warp's 16-byte copies touch at once, so those hit 8 different
/// bank groups.
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  static_assert(kRowBytes % 16 == 0 && kRowBytes >= 64, "rows of 16-byte chunks, at least 4");
  constexpr int kRowsPerLine = kRowBytes >= 128 ? 1 : 128 / kRowBytes;
  constexpr int kMask = kRowBytes >= 128 ? 7 : kRowBytes / 16 - 1;
  return uint32_t(r * kRowBytes + ((c ^ ((r / kRowsPerLine) & kMask)) << 4));
}

/// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile of rows of D 16-bit elements.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return swizzled<D * 2>(r, c);
}

/// Byte offset of 16-byte chunk `c` (8 elements) of row `r` in a tile of `rows` rows laid out
/// as [D / 64][rows][64 elements] with the 128-byte swizzle (chunk (c % 8) ^ (r % 8) of the
/// row's 128-byte line in slab c / 8): the layout the TMA unit writes with
/// CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads (slabs 1024-byte aligned).
template <int rows>
__device__ __forceinline__ uint32_t sw128(int r, int c) {
  return uint32_t((c >> 3) * (rows * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/// K/V tile layouts warp_rows reads: rows of D elements (swz, what load_kv_tile writes) or
/// 64-element slabs (sw128, what TMA writes).
template <int D>
struct row_tile {
  __device__ static __forceinline__ uint32_t at(int r, int c) { return swz<D>(r, c); }
};
template <int kRows>
struct slab_tile {
  __device__ static __forceinline__ uint32_t at(int r, int c) { return sw128<kRows>(r, c); }
};

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

template <class T>
struct elem;
template <>
struct elem<__nv_bfloat16> {
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static __forceinline__ void mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct elem<__half> {
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ static __forceinline__ void mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ __half from(float v) { return __float2half_rn(v); }
};

/// Cache offset (elements) of token `kpos`'s row of KV head `kvh`: [blocks, bs, KVH, D].
__device__ __forceinline__ size_t kv_row(const int32_t* bt, int kpos, int bs, int kvh, int kvh_count, int D) {
  return ((size_t(__ldg(bt + kpos / bs)) * bs + kpos % bs) * kvh_count + kvh) * D;
}

/// Issues the cp.async copies of K and V rows [k0, k0 + N) of one KV head into swizzled tiles
/// of rows of D elements of type E (uint16_t: the 16-bit cache; uint8_t: the FP8 cache's E4M3
/// codes), swizzled<D * sizeof(E)>; rows past kv_end are zero-filled (a zero E4M3 byte is +0).
/// `NT` threads share the work, `tid` this thread's index.
template <int D, int N, int NT, class E>
__device__ __forceinline__ void load_kv_tile(const E* kc, const E* vc, const int32_t* bt, int bs, int kvh,
                                             int kvh_count, int k0, int kv_end, uint32_t k_s, uint32_t v_s, int tid) {
  static_assert(sizeof(E) == 1 || sizeof(E) == 2, "E4M3 bytes or 16-bit elements");
  constexpr int kRowBytes = D * int(sizeof(E)), kChunks = kRowBytes / 16, kPer = 16 / int(sizeof(E));
  static_assert((N * kChunks) % NT == 0, "tile copy must divide evenly");
  if (bs % N == 0 && k0 % N == 0) {
    // The N rows lie in one block: one block-table read, then row r is r * KVH * D further.
    const size_t row0 = (size_t(__ldg(bt + k0 / bs)) * bs + k0 % bs) * kvh_count * D + size_t(kvh) * D;
    const E* kb = kc + row0;
    const E* vb = vc + row0;
    const int row_stride = kvh_count * D;
#pragma unroll
    for (int i = 0; i < N * kChunks / NT; ++i) {
      const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
      const bool ok = k0 + r < kv_end;
      const int off = ok ? r * row_stride + c * kPer : 0;
      cp_async16(k_s + swizzled<kRowBytes>(r, c), kb + off, ok ? 16 : 0);
      cp_async16(v_s + swizzled<kRowBytes>(r, c), vb + off, ok ? 16 : 0);
    }
    return;
  }
  if ((bs & (bs - 1)) == 0) {
    // Blocks smaller than the tile (vLLM's 8-32 tokens): shifts instead of divisions.
    const int sh = __ffs(bs) - 1;
    const size_t row_stride = size_t(kvh_count) * D, head = size_t(kvh) * D;
#pragma unroll
    for (int i = 0; i < N * kChunks / NT; ++i) {
      const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
      const int kpos = k0 + r;
      const bool ok = kpos < kv_end;
      const size_t off =
          ok ? ((size_t(__ldg(bt + (kpos >> sh))) << sh) + (kpos & (bs - 1))) * row_stride + head + c * kPer : 0;
      cp_async16(k_s + swizzled<kRowBytes>(r, c), kc + off, ok ? 16 : 0);
      cp_async16(v_s + swizzled<kRowBytes>(r, c), vc + off, ok ? 16 : 0);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < N * kChunks / NT; ++i) {
    const int idx = i * NT + tid, r = idx / kChunks, c = idx % kChunks;
    const int kpos = k0 + r;
    const bool ok = kpos < kv_end;
    const size_t off = ok ? kv_row(bt, kpos, bs, kvh, kvh_count, D) + c * kPer : 0;
    cp_async16(k_s + swizzled<kRowBytes>(r, c), kc + off, ok ? 16 : 0);
    cp_async16(v_s + swizzled<kRowBytes>(r, c), vc + off, ok ? 16 : 0);
  }
}

/// The kStages-deep cp.async K/V ring of the mma.sync kernels, start: issues tiles
/// [0, kStages - 1) (issue(tile, stage) copies a tile into a stage), one commit group each.
template <int kStages, class Issue>
__device__ __forceinline__ void kv_ring_start(int ntiles, Issue&& issue) {
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < ntiles) issue(st, st);
    cp_async_commit();
  }
}

/// The same ring at tile t: waits until tile t has landed for every thread (so every thread is
/// also done with tile t - 1's stage) and issues tile t + kStages - 1 into that stage.
template <int kStages, class Issue>
__device__ __forceinline__ void kv_ring_next(int t, int ntiles, Issue&& issue) {
  cp_async_wait<kStages - 2>();
  __syncthreads();
  const int nt = t + kStages - 1;
  if (nt < ntiles) issue(nt, nt % kStages);
  cp_async_commit();
}

/// Eight fp32 query values scaled and packed as T (one 16-byte shared-memory chunk).
template <class T>
__device__ __forceinline__ uint4 pack8(const float4& x0, const float4& x1, float sc) {
  return make_uint4(elem<T>::pack(x0.x * sc, x0.y * sc), elem<T>::pack(x0.z * sc, x0.w * sc),
                    elem<T>::pack(x1.x * sc, x1.y * sc), elem<T>::pack(x1.z * sc, x1.w * sc));
}

__device__ __forceinline__ void st_shared16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

/// Source of query row r (token q_begin + r / G, head kv_head * G + r % G), chunk c of 8 floats.
__device__ __forceinline__ const float4* q_src(const attn_launch& a, int q_begin, int kv_head, int r, int c, int D) {
  const int G = a.num_heads / a.num_kv_heads;
  return reinterpret_cast<const float4*>(a.q + size_t(q_begin + r / G) * a.q_stride + (kv_head * G + r % G) * D + c * 8);
}

/// Source of a cascade prefix item's row r (member r / G's decode token, through
/// attn_launch::prefix_rows; head kv_head * G + r % G), chunk c of 8 floats.
__device__ __forceinline__ const float4* member_q_src(const attn_launch& a, const attn_item& it, int r, int c, int D) {
  const int G = a.num_heads / a.num_kv_heads;
  const int token = __ldg(&a.prefix_rows[it.q_begin + r / G].token);
  return reinterpret_cast<const float4*>(a.q + size_t(token) * a.q_stride + (it.kv_head * G + r % G) * D + c * 8);
}

/// A cascade prefix item's row r (member r / G, head r % G) into its member's partial slot
/// (attn_prefix_row::partial, merged by launch_lse_combine): this lane's column pairs
/// (lane % 4) * 2 + 8 n of the output, o(n) unnormalised, divided by the row's sum l; the
/// log2-sum-exp m + log2(l) from the row's first lane.
template <int D, class O>
__device__ __forceinline__ void write_prefix_partial(const attn_launch& a, const attn_item& it, int r, int lane, float l,
                                                     float m, O o) {
  const int G = a.num_heads / a.num_kv_heads;
  const attn_prefix_row row = a.prefix_rows[it.q_begin + r / G];
  const size_t slot_row = size_t(row.partial) * tc_partial_rows + r % G;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  float* dst = a.partial_o + slot_row * D + (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const float2 v = o(n);
    *reinterpret_cast<float2*>(dst + n * 8) = make_float2(v.x * inv, v.y * inv);
  }
  if (lane % 4 == 0) a.partial_lse[slot_row * 2] = l > 0.0f ? m + log2f(l) : -INFINITY;
}

/// Writes query rows into a swizzled [rows, D] tile as T, times `sc` (the softmax scale in log2
/// units, so scores come out in log2 units; the FP8 cache's kernels fold k_scale into it).
/// Row r of the tile is token q_begin + r / G, head kv_head * G + r % G; rows >= valid are zeros.
template <class T, int D, int NT>
__device__ __forceinline__ void stage_q_scaled(const attn_launch& a, float sc, int q_begin, int kv_head, int rows,
                                               int valid, uint32_t q_s, int tid) {
  for (int idx = tid; idx < rows * (D / 8); idx += NT) {
    const int r = idx / (D / 8), c = idx % (D / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) {
      const float4* src = q_src(a, q_begin, kv_head, r, c, D);
      v = pack8<T>(src[0], src[1], sc);
    }
    st_shared16(q_s + swz<D>(r, c), v);
  }
}

/// stage_q_scaled with the softmax scale in log2 units.
template <class T, int D, int NT>
__device__ __forceinline__ void stage_q(const attn_launch& a, int q_begin, int kv_head, int rows, int valid,
                                        uint32_t q_s, int tid) {
  stage_q_scaled<T, D, NT>(a, a.scale * 1.4426950408889634f, q_begin, kv_head, rows, valid, q_s, tid);
}

/// The 16 query rows of a decode tile, loaded into registers before the first K/V copies are
/// issued (so these loads do not queue behind megabytes of them) and stored to shared memory
/// once the copies are in flight; the same tile as stage_q with rows = 16.
template <class T, int D, int NT>
struct q_prefetch {
  static constexpr int kChunks = 16 * (D / 8), kPer = (kChunks + NT - 1) / NT;
  float4 x[kPer][2];

  __device__ __forceinline__ void load(const attn_launch& a, int q_begin, int kv_head, int valid, int tid) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = i * NT + tid, r = idx / (D / 8), c = idx % (D / 8);
      x[i][0] = x[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (idx < kChunks && r < valid) {
        const float4* src = q_src(a, q_begin, kv_head, r, c, D);
        x[i][0] = __ldg(src);
        x[i][1] = __ldg(src + 1);
      }
    }
  }

  __device__ __forceinline__ void store(const attn_launch& a, uint32_t q_s, int tid) const {
    store_scaled(a.scale * 1.4426950408889634f, q_s, tid);
  }

  /// The same with the queries times `sc` (the FP8 cache's kernel folds k_scale into it).
  __device__ __forceinline__ void store_scaled(float sc, uint32_t q_s, int tid) const {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = i * NT + tid;
      if (idx < kChunks) st_shared16(q_s + swz<D>(idx / (D / 8), idx % (D / 8)), pack8<T>(x[i][0], x[i][1], sc));
    }
  }
};

/// Sets scores of keys k0 + column >= kv_end to -inf (the accumulator layout of m16n8).
template <int NK>
__device__ __forceinline__ void mask_tail(float (&s)[NK / 8][4], int k0, int kv_end, int lane) {
  if (k0 + NK <= kv_end) return;
#pragma unroll
  for (int n = 0; n < NK / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (k0 + n * 8 + (lane % 4) * 2 + (e & 1) >= kv_end) s[n][e] = -INFINITY;
}

/// One warp's 16 query rows: Q fragments in registers, the fp32 output accumulator and the
/// running max / sum of its two rows per thread (row g = lane / 4 and g + 8). D: the width of
/// the queries and keys, DV: of the values and outputs (DeepSeek-V2's up-projected heads: 192
/// and 128). Kv, Vt: the K and V tiles' layouts (row_tile or slab_tile); Q is always a row_tile.
template <class T, int D, class Kv = row_tile<D>, int DV = D, class Vt = std::conditional_t<DV == D, Kv, row_tile<DV>>>
struct warp_rows {
  static constexpr bool merges_in_registers = false;  ///< merged through shared memory only
  uint32_t qf[D / 16][4];
  float o[DV / 8][4];
  float m[2], l[2];

  __device__ __forceinline__ void init(uint32_t q_s, int lane) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      ldsm_x4(q_s + swz<D>(lane % 16, ks * 2 + lane / 16), qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3]);
#pragma unroll
    for (int n = 0; n < DV / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  /// Scores of this warp's rows against keys [key0, key0 + NK) of the K tile.
  template <int NK>
  __device__ __forceinline__ void scores(uint32_t k_s, int key0, int lane, float (&s)[NK / 8][4]) const {
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int nb = 0; nb < NK / 16; ++nb) {
        uint32_t b0, b1, b2, b3;
        const int row = key0 + nb * 16 + (lane / 16) * 8 + lane % 8;
        ldsm_x4(k_s + Kv::at(row, ks * 2 + (lane / 8) % 2), b0, b1, b2, b3);
        elem<T>::mma(s[2 * nb], qf[ks], b0, b1);
        elem<T>::mma(s[2 * nb + 1], qf[ks], b2, b3);
      }
    }
  }

  /// Online softmax over the (already masked: -inf) scores, then o += P V for keys
  /// [key0, key0 + NK) of the V tile.
  template <int NK>
  __device__ __forceinline__ void accumulate(float (&s)[NK / 8][4], uint32_t v_s, int key0, int lane) {
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float corr[2], base[2];
    online_softmax_rescale(mx, m, base, corr);
    float rs[2] = {0.0f, 0.0f};
    uint32_t pf[NK / 16][4];
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
      const float p0 = fast_exp2(s[n][0] - base[0]), p1 = fast_exp2(s[n][1] - base[0]);
      const float p2 = fast_exp2(s[n][2] - base[1]), p3 = fast_exp2(s[n][3] - base[1]);
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pf[n / 2][(n % 2) * 2] = elem<T>::pack(p0, p1);
      pf[n / 2][(n % 2) * 2 + 1] = elem<T>::pack(p2, p3);
    }
    l[0] = l[0] * corr[0] + rs[0];
    l[1] = l[1] * corr[1] + rs[1];
    // Once the running max settles (most tiles) no row of the warp needs its output rescaled.
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < DV / 8; ++n) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk) {
#pragma unroll
      for (int dn = 0; dn < DV / 16; ++dn) {
        uint32_t b0, b1, b2, b3;
        const int row = key0 + kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        ldsm_x4_t(v_s + Vt::at(row, dn * 2 + lane / 16), b0, b1, b2, b3);
        elem<T>::mma(o[2 * dn], pf[kk], b0, b1);
        elem<T>::mma(o[2 * dn + 1], pf[kk], b2, b3);
      }
    }
  }

  /// One decode step: scores, tail mask and accumulate of keys [key0, key0 + NK) of the K and V
  /// tiles, the first of them at position k0 of the sequence (keys at kv_end or later masked).
  template <int NK>
  __device__ __forceinline__ void step(uint32_t k_s, uint32_t v_s, int key0, int k0, int kv_end, int lane) {
    float s[NK / 8][4];
    scores<NK>(k_s, key0, lane, s);
    mask_tail<NK>(s, k0, kv_end, lane);
    accumulate<NK>(s, v_s, key0, lane);
  }

  /// Writes rows < valid of the warp's state for the decode kernels' warp merge:
  /// o_s[r * stride + d] (unnormalised output) and ml_s[2 r], ml_s[2 r + 1] (log2 max, sum).
  __device__ __forceinline__ void store_state(float* o_s, float* ml_s, int stride, int valid, int lane) {
    finish_sums();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + h * 8;
      if (row >= valid) continue;  // padding rows of a small group: never read
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
        *reinterpret_cast<float2*>(o_s + row * stride + n * 8 + (lane % 4) * 2) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
      if (lane % 4 == 0) {
        ml_s[row * 2] = m[h];
        ml_s[row * 2 + 1] = l[h];
      }
    }
  }

  /// Row sums over the quad (each thread summed only its own columns).
  __device__ __forceinline__ void finish_sums() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
  }
};

/// Divides a merged 4-column chunk `acc` by its weight `W` (0 when every piece was empty) and
/// stores it at columns [c, c + 4) of query row `r` of combine `cb` (token r / G, head r % G of
/// the KV group).
template <class T>
__device__ __forceinline__ void store_merged_chunk(const attn_launch& a, const attn_combine& cb, int G, int D, int r,
                                                   int c, float4 acc, float W) {
  const float inv = W > 0.0f ? 1.0f / W : 0.0f;
  const int tok = cb.q_begin + r / G, head = cb.kv_head * G + r % G;
  uint2 v;
  v.x = elem<T>::pack(acc.x * inv, acc.y * inv);
  v.y = elem<T>::pack(acc.z * inv, acc.w * inv);
  *reinterpret_cast<uint2*>(static_cast<T*>(a.out) + size_t(tok) * a.num_heads * D + head * D + c) = v;
}


}  // namespace actorserve::gpu::cuda::attn_dev
