#pragma once
// One warp's share of a decode tile with the keys as the M dimension of its MMAs and the query
// rows (at most 8: the heads of one GQA group for one decode token) as N:
//   S^T[keys, q] = K[keys, D] Q^T[D, q],   O^T[D, q] += V^T[D, keys] P^T[keys, q].
// With the rows as M (warp_rows) half of each 16-row MMA tile is padding at GQA 8 and three
// quarters at GQA 4; here an m16n8k16 MMA covers 16 keys x 8 rows, so a tile takes half the MMAs,
// half the exponentials and half the accumulator registers. P^T leaves the score MMA in the
// accumulator layout (keys as rows) and enters the PV MMA as its B operand (keys as columns):
// one movmatrix transpose per 8 x 8 block moves it across the lanes.
#include "gpu/cuda/attention/fp8_tiles.cuh"
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda::attn_dev {

/// Transpose of an 8 x 8 b16 matrix held one 32-bit pair per lane (row lane / 4, columns
/// 2 (lane % 4), + 1), returned in the same layout.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

/// Query rows a warp_keys tile holds (the N of m16n8k16).
inline constexpr int warp_keys_max_rows = 8;

/// Sums v over the 8 lanes of one query row (the lanes of equal lane % 4).
__device__ __forceinline__ void sum_over_row_lanes(float (&v)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) v[h] += __shfl_xor_sync(0xffffffffu, v[h], x);
}

/// How warp_keys reads a K/V tile layout Kv: the A fragments of 16 keys of K and of V^T, the B
/// fragments of Q^T they pair with, and which head dim each accumulator row of O^T holds. 16-bit
/// layouts (row_tile, slab_tile: Kv::at) by ldmatrix, the dims in their order; e4m3_tile below.
template <class Kv>
struct key_frags {
  /// Q^T for k-step ks: query rows 0-7 (lane / 4) of the swizzled [16, D] Q tile, dims ks * 16 + 0-15.
  template <class T, int D>
  __device__ static __forceinline__ void q(uint32_t q_s, int lane, uint32_t (&qf)[D / 16][2]) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ks += 2)
      ldsm_x4(q_s + swz<D>(lane % 8, ks * 2 + lane / 8), qf[ks][0], qf[ks][1], qf[ks + 1][0], qf[ks + 1][1]);
  }
  /// K of tile rows [key0, key0 + 16), every k-step.
  template <class T, int D>
  __device__ static __forceinline__ void k(uint32_t k_s, int key0, int lane, uint32_t (&kf)[D / 16][4]) {
    const int row = key0 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      ldsm_x4(k_s + Kv::at(row, ks * 2 + lane / 16), kf[ks][0], kf[ks][1], kf[ks][2], kf[ks][3]);
  }
  /// V of tile rows [key0, key0 + 16) as loaded, held while the scores' MMAs and softmax run:
  /// here already the A fragments of V^T.
  template <int D>
  struct v_regs {
    uint32_t f[D / 16][4];
  };
  /// V^T rows d * 16 + 0-7 / 8-15 over keys key0 + 0-7 / 8-15: transposed 8 x 8 loads of V.
  template <class T, int D>
  __device__ static __forceinline__ void v_load(uint32_t v_s, int key0, int lane, v_regs<D>& v) {
    const int vrow = key0 + (lane / 16) * 8 + lane % 8;
#pragma unroll
    for (int d = 0; d < D / 16; ++d)
      ldsm_x4_t(v_s + Kv::at(vrow, d * 2 + (lane / 8) % 2), v.f[d][0], v.f[d][1], v.f[d][2], v.f[d][3]);
  }
  /// The A fragment of V^T rows d * 16 + 0-15 (the accumulator rows of o[d]).
  template <class T, int D>
  __device__ static __forceinline__ void v_frag(const v_regs<D>& v, int d, uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = v.f[d][i];
  }
  /// The head dim of accumulator row g (upper = 0) or g + 8 (upper = 1) of o[d].
  __device__ static __forceinline__ int dim(int d, int g, int upper) { return d * 16 + g + 8 * upper; }
  /// Stores o[d] of one query row `out` (a thread's share after the movmatrix transposes: `lo`
  /// the T pair of accumulator rows c and c + 1, `hi` of rows c + 8 and c + 9).
  template <class T>
  __device__ static __forceinline__ void store(T* out, int d, int c, uint32_t lo, uint32_t hi) {
    *reinterpret_cast<uint32_t*>(out + d * 16 + c) = lo;
    *reinterpret_cast<uint32_t*>(out + d * 16 + 8 + c) = hi;
  }
};

/// E4M3 byte tiles (swizzled<D>, load_kv_tile<..., uint8_t>), converted in registers (exact,
/// e4m3x4_to) with no pass through shared memory. ldmatrix moves bytes as 16-bit pairs, so
/// both operands take a permuted order, numerically free:
///  - K (ldmatrix): a lane gets codes of dims 4t..4t+3 (t = lane % 4) of a 16-dim k-step and
///    uses dims (4t, 4t+2) as k-indices (2t, 2t+1), dims (4t+1, 4t+3) as (2t+8, 2t+9); Q^T's
///    fragments are read from the Q tile in the same order, so each MMA still sums the same 16
///    products.
///  - V (ldmatrix.trans): a lane gets dims 2g, 2g+1 (g = lane / 4) of keys 2t, 2t+1, so the
///    accumulator rows g and g + 8 of o[d] are dims d * 16 + 2g and 2g + 1 (the MMA's rows are
///    independent: only where the outputs are stored changes).
template <int D>
struct key_frags<e4m3_tile<D>> {
  template <class T, int kD>
  __device__ static __forceinline__ void q(uint32_t q_s, int lane, uint32_t (&qf)[D / 16][2]) {
    static_assert(kD == D, "the tile's head dim");
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t w0, w1;  // dims ks * 16 + 4t + (0, 1) and (2, 3) of query row g
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                   : "=r"(w0), "=r"(w1)
                   : "r"(q_s + swz<D>(g, ks * 2 + t / 2) + (t % 2) * 8)
                   : "memory");
      qf[ks][0] = __byte_perm(w0, w1, 0x5410);  // dims 4t, 4t + 2
      qf[ks][1] = __byte_perm(w0, w1, 0x7632);  // dims 4t + 1, 4t + 3
    }
  }
  /// One ldmatrix.x4 a pair of k-steps: keys 0-7 / 8-15 of byte chunks ks and ks + 1.
  template <class T, int kD>
  __device__ static __forceinline__ void k(uint32_t k_s, int key0, int lane, uint32_t (&kf)[D / 16][4]) {
    static_assert(kD == D, "the tile's head dim");
    const int row = key0 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks += 2) {
      uint32_t r[4];
      ldsm_x4(k_s + swizzled<D>(row, ks + lane / 16), r[0], r[1], r[2], r[3]);
      e4m3x4_to<T>(r[0], kf[ks][0], kf[ks][2]);
      e4m3x4_to<T>(r[1], kf[ks][1], kf[ks][3]);
      e4m3x4_to<T>(r[2], kf[ks + 1][0], kf[ks + 1][2]);
      e4m3x4_to<T>(r[3], kf[ks + 1][1], kf[ks + 1][3]);
    }
  }
  /// V as E4M3 codes, converted group by group right before its MMAs (v_frag): half the
  /// registers held across the softmax. One ldmatrix.x4.trans covers two 16-dim groups: keys 0-7
  /// / 8-15 of byte chunks d and d + 1.
  template <int Dv>
  struct v_regs {
    uint32_t raw[Dv / 32][4];
  };
  template <class T, int kD>
  __device__ static __forceinline__ void v_load(uint32_t v_s, int key0, int lane, v_regs<D>& v) {
    static_assert(kD == D, "the tile's head dim");
    const int row = key0 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
    for (int d = 0; d < D / 16; d += 2)
      ldsm_x4_t(v_s + swizzled<D>(row, d + lane / 16), v.raw[d / 2][0], v.raw[d / 2][1], v.raw[d / 2][2],
                v.raw[d / 2][3]);
  }
  /// Keys 0-7 of group d are raw[d / 2][2 (d % 2)], keys 8-15 the next word.
  template <class T, int kD>
  __device__ static __forceinline__ void v_frag(const v_regs<D>& v, int d, uint32_t (&a)[4]) {
    static_assert(kD == D, "the tile's head dim");
    e4m3x4_to<T>(v.raw[d / 2][2 * (d % 2)], a[0], a[1]);
    e4m3x4_to<T>(v.raw[d / 2][2 * (d % 2) + 1], a[2], a[3]);
  }
  __device__ static __forceinline__ int dim(int d, int g, int upper) { return d * 16 + 2 * g + upper; }
  /// `lo` holds dims 2c and 2c + 2 of the row, `hi` 2c + 1 and 2c + 3: interleaved, one 8-byte store.
  template <class T>
  __device__ static __forceinline__ void store(T* out, int d, int c, uint32_t lo, uint32_t hi) {
    *reinterpret_cast<uint2*>(out + d * 16 + 2 * c) = make_uint2(__byte_perm(lo, hi, 0x5410), __byte_perm(lo, hi, 0x7632));
  }
};

/// One warp's query rows 0-7 against its keys (warp_rows' interface: init, step, store_state).
/// Thread state: qf, the B fragments of Q^T; o[dm], the O^T accumulator of dims dm * 16 + g and
/// + 8 (g = lane / 4) for rows c and c + 1 (c = 2 (lane % 4)); m, l the running max and sum of
/// rows c and c + 1 (each thread sums its own keys until finish_sums).
template <class T, int D, class Kv = row_tile<D>>
struct warp_keys {
  static constexpr bool merges_in_registers = true;  ///< has merge_and_store
  uint32_t qf[D / 16][2];
  float o[D / 16][4];
  float m[2], l[2];

  /// Multiplies the accumulator of rows c and c + 1 by f0 and f1.
  __device__ __forceinline__ void scale_rows(float f0, float f1) {
#pragma unroll
    for (int d = 0; d < D / 16; ++d) {
      o[d][0] *= f0;
      o[d][1] *= f1;
      o[d][2] *= f0;
      o[d][3] *= f1;
    }
  }

  /// Q is the [16, D] swizzled tile staged as for warp_rows; only rows 0-7 are read.
  __device__ __forceinline__ void init(uint32_t q_s, int lane) {
    key_frags<Kv>::template q<T, D>(q_s, lane, qf);
#pragma unroll
    for (int d = 0; d < D / 16; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  /// Keys [key0, key0 + NK) of the K and V tiles (tile rows), the first of them at position k0
  /// of the sequence; keys below kv_lo (a sliding window's first key; window_first_key) and at
  /// kv_end or later are masked.
  template <int NK>
  __device__ __forceinline__ void step(uint32_t k_s, uint32_t v_s, int key0, int k0, int kv_lo, int kv_end,
                                       int lane) {
    constexpr int kM = NK / 16;
    const int g = lane / 4;
    float s[kM][4];
    typename key_frags<Kv>::template v_regs<D> v[kM];  // loaded while the scores' MMAs and softmax run
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      uint32_t kf[D / 16][4];
      key_frags<Kv>::template k<T, D>(k_s, key0 + mt * 16, lane, kf);
      // Two accumulators over the D / 16 k-steps: two dependency chains of MMAs, not one.
      float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      s[mt][0] = s[mt][1] = s[mt][2] = s[mt][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) elem<T>::mma(ks % 2 ? s2 : s[mt], kf[ks], qf[ks][0], qf[ks][1]);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][e] += s2[e];
      key_frags<Kv>::template v_load<T, D>(v_s, key0 + mt * 16, lane, v[mt]);
    }
    if (k0 < kv_lo || k0 + NK > kv_end) {
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kpos = k0 + mt * 16 + g + (e / 2) * 8;
          if (kpos >= kv_end || kpos < kv_lo) s[mt][e] = -INFINITY;
        }
    }
    // Online softmax per query row (a column here: 8 lanes of the same lane % 4).
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[mt][0], s[mt][2]));
      mx[1] = fmaxf(mx[1], fmaxf(s[mt][1], s[mt][3]));
    }
    float corr[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int x = 4; x < 32; x <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], x));
      base[h] = mx[h] == -INFINITY ? 0.0f : mx[h];
      corr[h] = fast_exp2(m[h] - base[h]);
      m[h] = mx[h];
    }
    uint32_t pb[kM][2];  // B fragments of P^T: keys mt * 16 + 0-7 and 8-15
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      const float p0 = fast_exp2(s[mt][0] - base[0]), p1 = fast_exp2(s[mt][1] - base[1]);
      const float p2 = fast_exp2(s[mt][2] - base[0]), p3 = fast_exp2(s[mt][3] - base[1]);
      rs[0] += p0 + p2;
      rs[1] += p1 + p3;
      pb[mt][0] = movmatrix_trans(elem<T>::pack(p0, p1));
      pb[mt][1] = movmatrix_trans(elem<T>::pack(p2, p3));
    }
    l[0] = l[0] * corr[0] + rs[0];
    l[1] = l[1] * corr[1] + rs[1];
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) scale_rows(corr[0], corr[1]);
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int d = 0; d < D / 16; ++d) {
        uint32_t vf[4];
        key_frags<Kv>::template v_frag<T, D>(v[mt], d, vf);
        elem<T>::mma(o[d], vf, pb[mt][0], pb[mt][1]);
      }
  }

  /// The warp merge of an item's final output, in registers (merge_warps_and_store calls it for
  /// it.partial < 0): warps 1..NW-1 leave their state in `red` (NW - 1 x 32 x (D / 16 + 1)
  /// float4s, one block per thread), warp 0 folds it into its own and stores rows < valid as T;
  /// the other warps are done after the barrier. The running sums stay per thread until the end
  /// (the weights depend only on the row), so a warp's state is its registers as they are.
  template <int NW>
  __device__ __forceinline__ void merge_and_store(const attn_launch& a, const attn_item& it, float* red, int valid,
                                                  int tid) {
    constexpr int kF4 = D / 16 + 1;  // float4s a thread leaves: its o, then (m0, m1, l0, l1)
    const int lane = tid & 31, warp = tid >> 5;
    float4* st = reinterpret_cast<float4*>(red);
    if (warp > 0) {
      float4* mine = st + ((warp - 1) * 32 + lane) * kF4;
#pragma unroll
      for (int d = 0; d < D / 16; ++d) mine[d] = make_float4(o[d][0], o[d][1], o[d][2], o[d][3]);
      mine[D / 16] = make_float4(m[0], m[1], l[0], l[1]);
    }
    __syncthreads();
    if (warp > 0) return;
    float4 ml[NW - 1];
    float M[2] = {m[0], m[1]};
#pragma unroll
    for (int w = 0; w < NW - 1; ++w) {
      ml[w] = st[(w * 32 + lane) * kF4 + D / 16];
      M[0] = fmaxf(M[0], ml[w].x);
      M[1] = fmaxf(M[1], ml[w].y);
    }
    // Weights 2^(m_w - M) (ex2 of -inf is 0: a warp that saw no key of the row weighs nothing).
    const auto weight = [](float mw, float mx) { return mx == -INFINITY ? 0.0f : fast_exp2(mw - mx); };
    float f[2] = {weight(m[0], M[0]), weight(m[1], M[1])};
    l[0] *= f[0];
    l[1] *= f[1];
    scale_rows(f[0], f[1]);
#pragma unroll
    for (int w = 0; w < NW - 1; ++w) {
      const float f0 = weight(ml[w].x, M[0]), f1 = weight(ml[w].y, M[1]);
      l[0] += ml[w].z * f0;
      l[1] += ml[w].w * f1;
#pragma unroll
      for (int d = 0; d < D / 16; ++d) {
        const float4 x = st[(w * 32 + lane) * kF4 + d];
        o[d][0] += x.x * f0;
        o[d][1] += x.y * f1;
        o[d][2] += x.z * f0;
        o[d][3] += x.w * f1;
      }
    }
    sum_over_row_lanes(l);
    const float inv0 = l[0] > 0.0f ? 1.0f / l[0] : 0.0f, inv1 = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
    // After the transpose a thread holds query row g, accumulator rows c, c + 1 (lo) and c + 8,
    // c + 9 (hi) of each o[d].
    const int g = lane / 4, c = (lane % 4) * 2, G = a.num_heads / a.num_kv_heads;
    T* out = static_cast<T*>(a.out) + (size_t(it.q_begin + g / G) * a.num_heads + it.kv_head * G + g % G) * D;
#pragma unroll
    for (int d = 0; d < D / 16; ++d) {
      const uint32_t lo = movmatrix_trans(elem<T>::pack(o[d][0] * inv0, o[d][1] * inv1));
      const uint32_t hi = movmatrix_trans(elem<T>::pack(o[d][2] * inv0, o[d][3] * inv1));
      if (g < valid) key_frags<Kv>::store(out, d, c, lo, hi);
    }
  }

  /// Writes rows < valid of the warp's state for merge_warps_and_store: o_s[r * stride + d]
  /// (unnormalised output) and ml_s[2 r], ml_s[2 r + 1] (log2 max, sum).
  __device__ __forceinline__ void store_state(float* o_s, float* ml_s, int stride, int valid, int lane) {
    sum_over_row_lanes(l);
    const int g = lane / 4, c = (lane % 4) * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (c + h >= valid) continue;
#pragma unroll
      for (int d = 0; d < D / 16; ++d) {
        o_s[(c + h) * stride + key_frags<Kv>::dim(d, g, 0)] = o[d][h];
        o_s[(c + h) * stride + key_frags<Kv>::dim(d, g, 1)] = o[d][2 + h];
      }
      if (g == 0) {
        ml_s[(c + h) * 2] = m[h];
        ml_s[(c + h) * 2 + 1] = l[h];
      }
    }
  }
};

}  // namespace actorserve::gpu::cuda::attn_dev
