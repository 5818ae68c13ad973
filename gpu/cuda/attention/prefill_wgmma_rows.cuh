#pragma once
// One consumer warpgroup's 64 query rows of the Hopper prefill kernels (prefill_wgmma_kernel.cu,
// prefill_pingpong_kernel.cu): S = Q K^T with wgmma from shared memory, the online softmax in
// exp2 on the accumulators, O += P V with P from registers; the causal (and sliding-window) mask
// bits and the per-CTA constants of one prefill item.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda/attention/prefill_wgmma.cuh"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda::attn_dev::wg {

inline constexpr int kRows = 64;  ///< query rows of a tile: one warpgroup's M

/// Bytes of a K (or V) tile of kKeys keys.
template <int D, int kKeys>
constexpr int tile_bytes() { return kKeys * D * 2; }
/// Bytes of one warpgroup's Q tile.
template <int D>
constexpr int q_bytes() { return kRows * D * 2; }

/// Visibility bits of a thread's kKeys / 2 scores (bit i: score i).
template <int kKeys>
using mask_t = std::conditional_t<(kKeys > 64), uint64_t, uint32_t>;

/// One consumer warpgroup's 64 query rows against kKeys-key tiles: this thread's output
/// accumulators (two rows, D / 4 columns each) and the running max / sum of its two rows.
template <class T, int D, int kKeys>
struct wg_rows {
  static_assert(kKeys == 32 || kKeys == 64 || kKeys == 128, "built for 32-, 64- and 128-key tiles");
  using mask = mask_t<kKeys>;
  float o[D / 2];
  float m[2], l[2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  /// Issues S = Q K^T against the K tile at k_s and commits it (the caller waits). The first
  /// MMA only writes s, so no value of s lives across tiles (a loop-carried s, written by the
  /// mask while the previous tile's P V is in flight, makes ptxas serialise the MMAs).
  __device__ __forceinline__ void issue_scores(uint32_t q_s, uint32_t k_s, float (&s)[kKeys / 2]) const {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint64_t da = desc_k_major<kRows>(q_s, ks), db = desc_k_major<kKeys>(k_s, ks);
      if constexpr (kKeys == 128) ks == 0 ? wgmma_ops<T>::ss_n128_first(s, da, db) : wgmma_ops<T>::ss_n128(s, da, db);
      else if constexpr (kKeys == 64) ks == 0 ? wgmma_ops<T>::ss_n64_first(s, da, db) : wgmma_ops<T>::ss_n64(s, da, db);
      else ks == 0 ? wgmma_ops<T>::ss_n32_first(s, da, db) : wgmma_ops<T>::ss_n32(s, da, db);
    }
    wgmma_commit();
  }

  /// The online softmax's exponentials: p = 2^(s - running max) over the scores whose bit in
  /// `vis` is set (the others count as -inf, p = 0), m and l moved on, corr the factor for o
  /// (rescale()). Reads s and writes p, m, l only: o and the P fragments of an MMA still in
  /// flight stay untouched. The mask is applied on the way, never written into s.
  /// kMasked false: every score is visible (vis unused), no per-score select on the ALU pipe
  /// (the busiest pipe of these kernels).
  template <bool kMasked>
  __device__ __forceinline__ void exponentials(const float (&s)[kKeys / 2], mask vis, float (&p)[kKeys / 2],
                                               float (&corr)[2]) {
    float x[kKeys / 2];
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) x[i] = !kMasked || ((vis >> i) & 1u) ? s[i] : -INFINITY;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(x[4 * n], x[4 * n + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(x[4 * n + 2], x[4 * n + 3]));
    }
    float base[2];
    online_softmax_rescale(mx, m, base, corr);
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      p[4 * n] = fast_exp2(x[4 * n] - base[0]);
      p[4 * n + 1] = fast_exp2(x[4 * n + 1] - base[0]);
      p[4 * n + 2] = fast_exp2(x[4 * n + 2] - base[1]);
      p[4 * n + 3] = fast_exp2(x[4 * n + 3] - base[1]);
      rs[0] += p[4 * n] + p[4 * n + 1];
      rs[1] += p[4 * n + 2] + p[4 * n + 3];
    }
    l[0] = l[0] * corr[0] + rs[0];
    l[1] = l[1] * corr[1] + rs[1];
  }

  /// P as bf16/fp16 A fragments of the P V MMAs.
  __device__ __forceinline__ static void pack(const float (&p)[kKeys / 2], uint32_t (&pf)[kKeys / 16][4]) {
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      pf[n / 2][(n % 2) * 2] = elem<T>::pack(p[4 * n], p[4 * n + 1]);
      pf[n / 2][(n % 2) * 2 + 1] = elem<T>::pack(p[4 * n + 2], p[4 * n + 3]);
    }
  }

  /// o *= corr per row, skipped when no row of the warp moved its max (most tiles).
  __device__ __forceinline__ void rescale(const float (&corr)[2]) {
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= corr[0];
        o[4 * n + 1] *= corr[0];
        o[4 * n + 2] *= corr[1];
        o[4 * n + 3] *= corr[1];
      }
    }
  }

  /// Issues O += P V against the V tile at v_s and commits it.
  __device__ __forceinline__ void issue_pv(const uint32_t (&pf)[kKeys / 16][4], uint32_t v_s) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      if constexpr (D == 128) wgmma_ops<T>::rs_t_n128(o, pf[kk], desc_mn_major<kKeys>(v_s, kk));
      else wgmma_ops<T>::rs_t_n64(o, pf[kk], desc_mn_major<kKeys>(v_s, kk));
    }
    wgmma_commit();
  }

  /// Normalises and writes this thread's two rows (r0, r0 + 8) of the tile.
  __device__ __forceinline__ void store(const attn_launch& a, const attn_item& it, int valid, int r0, int lane) {
    const int G = a.num_heads / a.num_kv_heads;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    T* out = static_cast<T*>(a.out);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + h * 8;
      if (r >= valid) continue;
      const int tok = it.q_begin + r / G, head = it.kv_head * G + r % G;
      const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
      T* dst = out + size_t(tok) * a.num_heads * D + head * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + n * 8) = elem<T>::pack(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
    }
  }

  /// A cascade prefix item's rows (r0, r0 + 8): each normalised row and its log2-sum-exp into
  /// its member's partial slot (write_prefix_partial).
  __device__ __forceinline__ void store_partial(const attn_launch& a, const attn_item& it, int valid, int r0,
                                                int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + h * 8;
      if (r >= valid) continue;
      write_prefix_partial<D>(a, it, r, lane, l[h], m[h],
                              [&](int n) { return make_float2(o[4 * n + 2 * h], o[4 * n + 2 * h + 1]); });
    }
  }
};

/// Visibility bits of this thread's kKeys / 2 scores against keys [k0, k0 + kKeys) (bit i:
/// score i): causal (key <= the row's position, qpos = this thread's two rows), before kv_end,
/// and inside the row's sliding window (window_first_key; `window` 0: none).
template <int kKeys>
__device__ __forceinline__ mask_t<kKeys> visible(int k0, const int (&qpos)[2], int kv_end, int window, int lane) {
  const int lo[2] = {window_first_key(qpos[0], window), window_first_key(qpos[1], window)};
  mask_t<kKeys> vis = 0;
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kpos = k0 + n * 8 + (lane % 4) * 2 + (e & 1);
      if (kpos <= qpos[e >> 1] && kpos < kv_end && kpos >= lo[e >> 1]) vis |= mask_t<kKeys>(1) << (4 * n + e);
    }
  return vis;
}

/// Per-CTA constants of one item cut into kKeys-key tiles.
template <int kKeys>
struct tile_ctx {
  attn_item it;
  int valid, pos0, ntiles, r0, qpos[2];
  int window;    ///< attn_launch::window (0: none)
  int lo_last;   ///< the first key the item's last row sees (window_first_key)

  __device__ __forceinline__ tile_ctx(const attn_launch& a, int warp, int lane) : tile_ctx(a, blockIdx.x, warp, lane) {}
  /// The constants of item `item` (a persistent CTA's current one).
  __device__ __forceinline__ tile_ctx(const attn_launch& a, int item, int warp, int lane) : it(a.items[item]) {
    const attn_seq sq = a.seqs[it.seq];
    const int G = a.num_heads / a.num_kv_heads;
    valid = it.q_len * G;
    pos0 = sq.context_len - sq.q_len + (it.q_begin - sq.q_start);
    ntiles = (it.kv_end - it.kv_begin + kKeys - 1) / kKeys;
    r0 = warp * 16 + lane / 4;
    qpos[0] = pos0 + min(r0, valid - 1) / G;
    qpos[1] = pos0 + min(r0 + 8, valid - 1) / G;
    window = a.window;
    lo_last = window_first_key(pos0 + (valid - 1) / G, window);
  }
  /// Whether tile t holds keys some row of the tile must not see (diagonal, past kv_end, or
  /// below the last row's window: the plan starts the item at its first row's window).
  __device__ __forceinline__ bool needs_mask(int t) const {
    const int k0 = it.kv_begin + t * kKeys;
    return k0 + kKeys - 1 > pos0 || k0 + kKeys > it.kv_end || k0 < lo_last;
  }
  /// The mask bits of (masked) tile t.
  __device__ __forceinline__ mask_t<kKeys> tile_mask(int t, int lane) const {
    return visible<kKeys>(it.kv_begin + t * kKeys, qpos, it.kv_end, window, lane);
  }
};

/// Visibility bits of this thread's scores of keys [k0, k0 + N): the keys before kv_end
/// (wg_rows's layout: score 4 n + e is key k0 + 8 n + 2 (lane % 4) + (e & 1)).
template <int N>
__device__ __forceinline__ mask_t<N> before_end(int k0, int kv_end, int lane) {
  mask_t<N> vis = 0;
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (k0 + n * 8 + (lane % 4) * 2 + (e & 1) < kv_end) vis |= mask_t<N>(1) << (4 * n + e);
  return vis;
}

/// tile_ctx's counterpart for a cascade prefix item (launch_cascade_prefix): every row (a
/// member's decode token and head) sees every key of the piece, so only the keys past kv_end
/// of its last tile are masked.
template <int kKeys>
struct prefix_tile_ctx {
  attn_item it;
  int valid, ntiles, r0;

  __device__ __forceinline__ prefix_tile_ctx(const attn_launch& a, int item, int warp, int lane) : it(a.items[item]) {
    valid = it.q_len * (a.num_heads / a.num_kv_heads);
    ntiles = (it.kv_end - it.kv_begin + kKeys - 1) / kKeys;
    r0 = warp * 16 + lane / 4;
  }
  __device__ __forceinline__ bool needs_mask(int t) const { return it.kv_begin + (t + 1) * kKeys > it.kv_end; }
  __device__ __forceinline__ mask_t<kKeys> tile_mask(int t, int lane) const {
    return before_end<kKeys>(it.kv_begin + t * kKeys, it.kv_end, lane);
  }
};

/// The online softmax's exponentials of tile t (wg_rows::exponentials), masked only where the
/// tile needs it (the branch is uniform over the CTA). Ctx: tile_ctx or prefix_tile_ctx.
template <class T, int D, int kKeys, class Ctx>
__device__ __forceinline__ void tile_exponentials(wg_rows<T, D, kKeys>& w, const Ctx& c, int t,
                                                  const float (&s)[kKeys / 2], float (&p)[kKeys / 2],
                                                  float (&corr)[2], int lane) {
  if (c.needs_mask(t)) w.template exponentials<true>(s, c.tile_mask(t, lane), p, corr);
  else w.template exponentials<false>(s, 0, p, corr);
}

/// One tile in turn (the kernels without overlap): S = Q K^T, wait, the online softmax masked
/// by tile t's bits, O += P V, wait. Each MMA is waited for before its registers are touched.
template <class T, int D, int kKeys, class Ctx>
__device__ __forceinline__ void serial_tile(wg_rows<T, D, kKeys>& w, const Ctx& c, int t, uint32_t q_s,
                                            uint32_t k_s, uint32_t v_s, int lane) {
  float s[kKeys / 2], p[kKeys / 2], corr[2];
  uint32_t pf[kKeys / 16][4];
  w.issue_scores(q_s, k_s, s);
  wgmma_wait<0>();
  fence_regs(s);
  fence_regs(w.o);
  tile_exponentials(w, c, t, s, p, corr, lane);
  w.pack(p, pf);
  w.rescale(corr);
  w.issue_pv(pf, v_s);
  wgmma_wait<0>();
  fence_regs(w.o);
}

}  // namespace actorserve::gpu::cuda::attn_dev::wg
