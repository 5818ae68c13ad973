// Causal, variable-length prefill (and chunked prefill over a cached prefix) on Hopper's
// warpgroup MMAs. A CTA takes one prefill item: 64 query rows (tokens x heads of one GQA group)
// against the paged K/V of their KV head, in 64-key tiles. One consumer warpgroup computes
// S = Q K^T with wgmma from shared memory (Q and K K-major, 128-byte swizzle), the online softmax
// in exp2 on the accumulators, then O += P V with P from registers and V as an MN-major operand.
// Variant 3/5: a producer warp streams K/V tiles into a 2/3-stage shared-memory ring with
// cp.async, signalling each stage on an mbarrier; the consumer releases a stage once the MMAs
// reading it have completed. Two CTAs per SM interleave one's softmax with the other's MMAs.
// Variant 7: 32-key tiles in a 3-stage ring, three CTAs per SM.
// Variant 4: the warpgroup copies (cp.async, 2 stages) and computes in turn, every MMA waited
// at once; no warp specialisation. Measured fastest on the H200 (docs/attention.md), so it is
// the default where it was measured (bf16, head dim 128, blocks of a multiple of 64 tokens).
// Built for sm_90a only: on other targets the kernels trap, and the host never selects them
// on a device that is not compute capability 9.x.
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/prefill_wgmma.cuh"
#include "gpu/cuda/attention/prefill_wgmma.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

constexpr int kRows = 64;  ///< query rows of a tile: one warpgroup's M

/// Bytes of a K (or V) tile of kKeys keys.
template <int D, int kKeys>
constexpr int tile_bytes() { return kKeys * D * 2; }
template <int D>
constexpr int q_bytes() { return kRows * D * 2; }

/// One consumer warpgroup's 64 query rows against kKeys-key tiles: this thread's output
/// accumulators (two rows, D / 4 columns each) and the running max / sum of its two rows.
template <class T, int D, int kKeys>
struct wg_rows {
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
    static_assert(kKeys == 32 || kKeys == 64, "built for 32- and 64-key tiles");
    wgmma_fence();
    if constexpr (kKeys == 64) wgmma_ops<T>::ss_n64_first(s, desc_k_major<kRows>(q_s, 0), desc_k_major<kKeys>(k_s, 0));
    else wgmma_ops<T>::ss_n32_first(s, desc_k_major<kRows>(q_s, 0), desc_k_major<kKeys>(k_s, 0));
#pragma unroll
    for (int ks = 1; ks < D / 16; ++ks) {
      if constexpr (kKeys == 64) wgmma_ops<T>::ss_n64(s, desc_k_major<kRows>(q_s, ks), desc_k_major<kKeys>(k_s, ks));
      else wgmma_ops<T>::ss_n32(s, desc_k_major<kRows>(q_s, ks), desc_k_major<kKeys>(k_s, ks));
    }
    wgmma_commit();
  }

  /// Online softmax over the scores whose bit in `vis` is set (the others count as -inf): P as
  /// bf16/fp16 A fragments, o rescaled. The mask is applied on the way, never written into s:
  /// writing the accumulator registers while the previous P V is in flight makes ptxas
  /// serialise the MMAs.
  __device__ __forceinline__ void softmax(const float (&s)[kKeys / 2], uint32_t vis, uint32_t (&pf)[kKeys / 16][4]) {
    float x[kKeys / 2];
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) x[i] = (vis >> i) & 1u ? s[i] : -INFINITY;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(x[4 * n], x[4 * n + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(x[4 * n + 2], x[4 * n + 3]));
    }
    float corr[2], base[2];
    online_softmax_rescale(mx, m, base, corr);
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      const float p0 = fast_exp2(x[4 * n] - base[0]), p1 = fast_exp2(x[4 * n + 1] - base[0]);
      const float p2 = fast_exp2(x[4 * n + 2] - base[1]), p3 = fast_exp2(x[4 * n + 3] - base[1]);
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pf[n / 2][(n % 2) * 2] = elem<T>::pack(p0, p1);
      pf[n / 2][(n % 2) * 2 + 1] = elem<T>::pack(p2, p3);
    }
    l[0] = l[0] * corr[0] + rs[0];
    l[1] = l[1] * corr[1] + rs[1];
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
};

/// Visibility bits of this thread's kKeys / 2 scores against keys [k0, k0 + kKeys) (bit i:
/// score i): causal (key <= the row's position, qpos = this thread's two rows), before kv_end.
template <int kKeys>
__device__ __forceinline__ uint32_t visible(int k0, const int (&qpos)[2], int kv_end, int lane) {
  uint32_t vis = 0;
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kpos = k0 + n * 8 + (lane % 4) * 2 + (e & 1);
      if (kpos <= qpos[e >> 1] && kpos < kv_end) vis |= 1u << (4 * n + e);
    }
  return vis;
}

/// Per-CTA constants of one item cut into kKeys-key tiles.
template <int kKeys>
struct tile_ctx {
  attn_item it;
  int valid, pos0, ntiles, r0, qpos[2];

  __device__ __forceinline__ tile_ctx(const attn_launch& a, int warp, int lane) : it(a.items[blockIdx.x]) {
    const attn_seq sq = a.seqs[it.seq];
    const int G = a.num_heads / a.num_kv_heads;
    valid = it.q_len * G;
    pos0 = sq.context_len - sq.q_len + (it.q_begin - sq.q_start);
    ntiles = (it.kv_end - it.kv_begin + kKeys - 1) / kKeys;
    r0 = warp * 16 + lane / 4;
    qpos[0] = pos0 + min(r0, valid - 1) / G;
    qpos[1] = pos0 + min(r0 + 8, valid - 1) / G;
  }
  /// Whether tile t holds keys some row of the tile must not see (diagonal or past kv_end).
  __device__ __forceinline__ bool needs_mask(int t) const {
    const int k0 = it.kv_begin + t * kKeys;
    return k0 + kKeys - 1 > pos0 || k0 + kKeys > it.kv_end;
  }
};

template <int D, int kKeys, int kStages>
constexpr int ws_smem_bytes(bool slack) {
  return (slack ? 1024 : 0) + q_bytes<D>() + kStages * 2 * tile_bytes<D, kKeys>() + 16 * kStages;
}

/// Variants 3, 5, 7: warps 0-3 consume (one warpgroup), warp 4 produces; kMinBlocks CTAs per
/// SM. kSlack: the dynamic shared memory is over-allocated by 1 KiB and aligned here; without
/// it (the 3-stage ring, which must fit twice per SM) the base must already be 1024-aligned,
/// or the kernel traps. Each tile's P V is waited for before the next tile: leaving it in
/// flight across the next S (measured as a variant) made ptxas serialise the MMAs (C7515) and
/// lost 20 %.
template <class T, int D, int kKeys, int kStages, bool kSlack, int kMinBlocks>
__global__ void __launch_bounds__(160, kMinBlocks) wgmma_prefill_ws(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kTB = tile_bytes<D, kKeys>();
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  if (!kSlack && (raw & 1023u) != 0) __trap();
  const uint32_t q_s = kSlack ? (raw + 1023u) & ~1023u : raw;
  const uint32_t kv0 = q_s + q_bytes<D>(), bars = kv0 + kStages * 2 * kTB;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const tile_ctx<kKeys> c(a, warp, lane);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bars + 8 * s, 32);             // full: the producer warp's cp.async arrivals
      mbar_init(bars + 8 * (kStages + s), 4);  // empty: one arrival per consumer warp
    }
  }
  __syncthreads();
  if (warp == 4) {
    const int32_t* bt = a.block_tables + a.seqs[c.it.seq].bt_offset;
    const auto* kc = static_cast<const uint16_t*>(a.k_cache);
    const auto* vc = static_cast<const uint16_t*>(a.v_cache);
    for (int t = 0; t < c.ntiles; ++t) {
      const int st = t % kStages;
      if (t >= kStages) mbar_wait(bars + 8 * (kStages + st), uint32_t((t / kStages - 1) & 1));
      const uint32_t k_s = kv0 + st * 2 * kTB;
      load_kv<D, kKeys, 32>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, c.it.kv_begin + t * kKeys,
                            c.it.kv_end, k_s, k_s + kTB, lane);
      mbar_arrive_cp_async(bars + 8 * st);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  stage_q_sw128<T, D, 128>(a, c.it.q_begin, c.it.kv_head, c.valid, q_s, tid);
  fence_proxy_async();
  named_sync(1, 128);
  wg_rows<T, D, kKeys> w;
  w.init();
  for (int t = 0; t < c.ntiles; ++t) {
    const int st = t % kStages;
    mbar_wait(bars + 8 * st, uint32_t((t / kStages) & 1));
    fence_proxy_async();
    const uint32_t k_s = kv0 + st * 2 * kTB;
    float s[kKeys / 2];
    uint32_t pf[kKeys / 16][4];
    w.issue_scores(q_s, k_s, s);
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(w.o);
    const uint32_t vis = c.needs_mask(t) ? visible<kKeys>(c.it.kv_begin + t * kKeys, c.qpos, c.it.kv_end, lane) : ~0u;
    w.softmax(s, vis, pf);
    w.issue_pv(pf, k_s + kTB);
    wgmma_wait<0>();
    fence_regs(w.o);
    if (lane == 0) mbar_arrive(bars + 8 * (kStages + st));  // this warp is done with the stage
  }
  w.store(a, c.it, c.valid, c.r0, lane);
#endif
}

/// Variant 4: one warpgroup copies (cp.async groups, 2 stages) and computes in turn.
template <class T, int D>
__global__ void __launch_bounds__(128, 2) wgmma_prefill_simple(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kKeys = 64, kTB = tile_bytes<D, kKeys>(), kStages = 2;
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t q_s = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q_s + q_bytes<D>();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const tile_ctx<kKeys> c(a, warp, lane);
  const int32_t* bt = a.block_tables + a.seqs[c.it.seq].bt_offset;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  load_kv<D, kKeys, 128>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, c.it.kv_begin, c.it.kv_end, kv0,
                         kv0 + kTB, tid);
  cp_async_commit();
  stage_q_sw128<T, D, 128>(a, c.it.q_begin, c.it.kv_head, c.valid, q_s, tid);
  wg_rows<T, D, kKeys> w;
  w.init();
  float s[kKeys / 2];
  uint32_t pf[kKeys / 16][4];
  for (int t = 0; t < c.ntiles; ++t) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile t (and Q) in shared memory for every thread; tile t - 1 fully read
    if (t + 1 < c.ntiles) {
      const uint32_t nk = kv0 + ((t + 1) % kStages) * 2 * kTB;
      load_kv<D, kKeys, 128>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, c.it.kv_begin + (t + 1) * kKeys,
                             c.it.kv_end, nk, nk + kTB, tid);
    }
    cp_async_commit();
    const uint32_t k_s = kv0 + (t % kStages) * 2 * kTB;
    w.issue_scores(q_s, k_s, s);
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(w.o);
    const uint32_t vis = c.needs_mask(t) ? visible<kKeys>(c.it.kv_begin + t * kKeys, c.qpos, c.it.kv_end, lane) : ~0u;
    w.softmax(s, vis, pf);
    w.issue_pv(pf, k_s + kTB);
    wgmma_wait<0>();
    fence_regs(w.o);
  }
  w.store(a, c.it, c.valid, c.r0, lane);
#endif
}

/// Variant 9 (not yet measured on a GPU): items of up to 128 query rows, as a planner cutting
/// 128-row tiles would make them. Two warpgroups take 64 rows each against the same K/V tiles,
/// so every tile read from L2 serves 128 rows (half the K/V stream of the 64-row items); all
/// 256 threads copy through a kStages-stage cp.async ring; one CTA per SM. A warpgroup skips
/// the tiles none of its rows sees (and every tile when the item has no rows for it).
template <class T, int D, int kStages>
__global__ void __launch_bounds__(256, 1) wgmma_prefill_rows128(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kKeys = 64, kTB = tile_bytes<D, kKeys>();
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t q0 = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q0 + 2 * q_bytes<D>();
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const tile_ctx<kKeys> c(a, 4 * wg + warp, lane);  // rows 64 wg + 16 warp + lane / 4 (+ 8)
  const int G = a.num_heads / a.num_kv_heads;
  const bool has_rows = c.valid > 64 * wg;
  const int wg_last = c.pos0 + min(64 * wg + 63, c.valid - 1) / G;  // the furthest-seeing row
  const int32_t* bt = a.block_tables + a.seqs[c.it.seq].bt_offset;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < c.ntiles) {
      const uint32_t k_s = kv0 + st * 2 * kTB;
      load_kv<D, kKeys, 256>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, c.it.kv_begin + st * kKeys,
                             c.it.kv_end, k_s, k_s + kTB, tid);
    }
    cp_async_commit();
  }
  const uint32_t q_s = q0 + wg * q_bytes<D>();
  stage_q_sw128<T, D, 128>(a, c.it.q_begin, c.it.kv_head, c.valid, q_s, tid & 127, 64 * wg);
  wg_rows<T, D, kKeys> w;
  w.init();
  for (int t = 0; t < c.ntiles; ++t) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();  // tile t (and Q) in shared memory for every thread; tile t - 1 fully read
    const int nt = t + kStages - 1;
    if (nt < c.ntiles) {
      const uint32_t k_s = kv0 + (nt % kStages) * 2 * kTB;
      load_kv<D, kKeys, 256>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, c.it.kv_begin + nt * kKeys,
                             c.it.kv_end, k_s, k_s + kTB, tid);
    }
    cp_async_commit();
    const int k0 = c.it.kv_begin + t * kKeys;
    if (!has_rows || k0 > wg_last) continue;  // causal: no row of this warpgroup sees these keys
    const uint32_t k_s = kv0 + (t % kStages) * 2 * kTB;
    float s[kKeys / 2];
    uint32_t pf[kKeys / 16][4];
    w.issue_scores(q_s, k_s, s);
    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(w.o);
    const uint32_t vis = c.needs_mask(t) ? visible<kKeys>(k0, c.qpos, c.it.kv_end, lane) : ~0u;
    w.softmax(s, vis, pf);
    w.issue_pv(pf, k_s + kTB);
    wgmma_wait<0>();
    fence_regs(w.o);
  }
  w.store(a, c.it, c.valid, c.r0, lane);
#endif
}

template <class K>
int start(K kernel, int threads, int smem, const attn_launch& a, cudaStream_t s) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return int(e);
  if (a.prefill_grid > 0) kernel<<<a.prefill_grid, threads, smem, s>>>(a);
  return int(cudaGetLastError());
}

template <class T, int D>
int launch(const attn_launch& a, int variant, cudaStream_t s) {
  if (variant == 9)
    return start(wgmma_prefill_rows128<T, D, 3>, 256, 1024 + 2 * q_bytes<D>() + 6 * tile_bytes<D, 64>(), a, s);
  if constexpr (D == 128 && std::is_same_v<T, __nv_bfloat16>) {
    if (variant == 4)
      return start(wgmma_prefill_simple<T, D>, 128, 1024 + q_bytes<D>() + 4 * tile_bytes<D, 64>(), a, s);
    if (variant == 5)
      return start(wgmma_prefill_ws<T, D, 64, 3, false, 2>, 160, ws_smem_bytes<D, 64, 3>(false), a, s);
    if (variant == 7)
      return start(wgmma_prefill_ws<T, D, 32, 3, true, 3>, 160, ws_smem_bytes<D, 32, 3>(true), a, s);
  }
  return start(wgmma_prefill_ws<T, D, 64, 2, true, 2>, 160, ws_smem_bytes<D, 64, 2>(true), a, s);
}

}  // namespace

bool wgmma_prefill_available() {
  static const bool hopper = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major == 9;
  }();
  return hopper;
}

int launch_wgmma_prefill(act_dtype dt, const attn_launch& a, int variant, cudaStream_t s) {
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, variant, s) : launch<__half, 128>(a, variant, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, variant, s) : launch<__half, 64>(a, variant, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
