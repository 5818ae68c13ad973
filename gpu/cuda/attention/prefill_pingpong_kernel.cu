// prefill_kernel::wgmma_tma_persistent (bf16, head dim 128): FlashAttention-3's scheduling on
// Hopper over 128-row prefill items (tokens x heads of one GQA group, one KV head). A CTA has
// three warpgroups: warpgroup 0 produces, filling a kStages-deep K/V ring (K and V of a stage
// signal separate "full" mbarriers, so S can start before V lands) and hands registers to the
// consumers (setmaxnreg); warpgroups 1 and 2 consume, 64 query rows each, against the same K/V
// tiles. One producer warp fills the ring through the TMA unit: one thread issues a tile's boxes
// (kv_tensor_map.hpp), no per-thread address arithmetic. The CTAs are persistent: one per SM
// walks the items, the ring runs on from one item into the next, and the producer warpgroup's
// other three warps stage the next item's queries (copies of rope's 16-bit scaled queries, or
// fp32 -> bf16 scaled) into a second Q pair meanwhile, so an item starts without waiting for its
// queries or its first K/V tiles.
//
// Each consumer overlaps inside itself: it issues S(t) = Q K(t)^T and O += P(t-1) V(t-1)
// back to back, waits for S(t) only, runs the softmax of S(t) while P V is still in flight,
// then waits for P V before it rescales O and packs P(t). Nothing touches O or the P fragments
// between P V's issue and its wait (ptxas would serialise the MMAs: C7515; it does not here).
// The two consumers also take turns to issue their MMAs (named barriers 1 and 2, 256 threads:
// one waits in bar.sync, the other arrives), so one warpgroup's softmax runs under the other's
// MMAs. Both walk the same tiles (the lower rows' extra diagonal tile is masked), so their
// barrier counts match.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/kv_tensor_map.hpp"
#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/prefill_wgmma_rows.cuh"
#include "gpu/cuda/sm_count.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177  // the constants and functions only the sm_90a kernel body uses
#endif

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

/// Registers per thread after setmaxnreg. The consumers can only take what the producer gave
/// back from the 168 x 384 allocated at launch (__launch_bounds__(384, 1)): 128 x 56 + 256 x 224
/// = 168 x 384 (more, and setmaxnreg.inc waits forever: the CTA hangs). ptxas -v:
/// no spills; with 40 / 232 or 24 / 240 the producer's copy loop spilled.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * 384, "setmaxnreg.inc would wait forever");

/// The ring of a CTA's K/V tiles, counted over every item the CTA takes (a persistent CTA's
/// ring runs on from one item into the next): tile n sits in stage n % kStages, and each
/// stage has a "full K", a "full V" and an "empty" mbarrier whose phase n / kStages it is.
template <int D, int kKeys, int kStages>
struct kv_ring {
  static constexpr int kTB = tile_bytes<D, kKeys>();
  uint32_t kv0, bars;  // the stages' tiles (K then V); the barriers (3 per stage)
  __device__ __forceinline__ uint32_t k_tile(int n) const { return kv0 + (n % kStages) * 2 * kTB; }
  __device__ __forceinline__ uint32_t v_tile(int n) const { return k_tile(n) + kTB; }
  __device__ __forceinline__ uint32_t full_k(int n) const { return bars + 8 * (n % kStages); }
  __device__ __forceinline__ uint32_t full_v(int n) const { return bars + 8 * (kStages + n % kStages); }
  __device__ __forceinline__ uint32_t empty(int n) const { return bars + 8 * (2 * kStages + n % kStages); }
  __device__ __forceinline__ static uint32_t parity(int n) { return uint32_t((n / kStages) & 1); }
};

/// Dynamic shared memory: 1 KiB alignment slack, kQBufs pairs of Q tiles (two 64-row tiles per
/// item), the ring, 3 mbarriers per stage and 2 per Q pair.
template <int D, int kKeys, int kStages, int kQBufs>
constexpr int pingpong_smem_bytes() {
  return 1024 + kQBufs * 2 * q_bytes<D>() + kStages * 2 * tile_bytes<D, kKeys>() + 24 * kStages + 16 * kQBufs;
}

/// Producer threads that copy K/V: one warp issuing TMA boxes (warp 0 of the producer warpgroup).
inline constexpr int kProducerThreads = 32;
/// Threads of the producer warpgroup that stage queries (warps 1-3).
inline constexpr int kQStagers = 96;

/// The producer's K/V stream over the CTA's items (blockIdx.x, + stride, ... < items): tile n
/// of the CTA into its ring stage once the consumers have released the stage. A
/// tile whose keys all precede kv_end comes as TMA boxes of maps.box_rows tokens x 64 elements
/// (one block, or 64 tokens of one, per box: 4 per K or V tile of 64 keys at D 128 and block
/// size 32) that lane 0 issues, the other lanes only arriving; the tail tile, and every tile
/// of an item whose first key is not box-aligned, comes by cp.async with the rows past kv_end
/// zero-filled (P V reads those rows with P = 0, and 0 x a stale NaN is not 0).
template <int D, int kKeys, int kStages>
__device__ __forceinline__ void produce_kv(const attn_launch& a, const kv_tensor_maps& maps,
                                           const kv_ring<D, kKeys, kStages>& ring, int items, int stride, int tid) {
  constexpr int kTB = tile_bytes<D, kKeys>(), kNT = kProducerThreads;
  const int bs = a.block_size, rows = maps.box_rows, segs = rows > 0 ? kKeys / rows : 0;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  int n = 0;
  for (int item = blockIdx.x; item < items; item += stride) {
    const attn_item it = a.items[item];
    const int ntiles = (it.kv_end - it.kv_begin + kKeys - 1) / kKeys;
    const int32_t* bt = a.block_tables + a.seqs[it.seq].bt_offset;
    const bool tma = rows > 0 && kKeys % rows == 0 && it.kv_begin % rows == 0;
    for (int t = 0; t < ntiles; ++t, ++n) {
      if (n >= kStages) mbar_wait(ring.empty(n), ring.parity(n) ^ 1u);
      const uint32_t k_s = ring.k_tile(n), full_k = ring.full_k(n), full_v = ring.full_v(n);
      const int k0 = it.kv_begin + t * kKeys;
      if (tma && k0 + kKeys <= it.kv_end) {
        // Lane g < segs looks up the block of box g (rows tokens); lane 0 issues every box.
        const int kg = k0 + rows * (tid % segs);
        const int my_row = __ldg(bt + kg / bs) * bs + kg % bs;
        if (tid == 0) {
          mbar_arrive_expect_tx(full_k, kTB);
          mbar_arrive_expect_tx(full_v, kTB);
        } else {
          mbar_arrive(full_k);
          mbar_arrive(full_v);
        }
        const int col = it.kv_head * D;
        for (int g = 0; g < segs; ++g) {
          const int row = __shfl_sync(0xffffffffu, my_row, g);
          if (tid != 0) continue;
#pragma unroll
          for (int j = 0; j < D / kv_box_cols; ++j) {
            const uint32_t off = j * kKeys * 128 + g * rows * 128;
            tma_load_2d(k_s + off, &maps.k, col + j * kv_box_cols, row, full_k);
            tma_load_2d(k_s + kTB + off, &maps.v, col + j * kv_box_cols, row, full_v);
          }
        }
        continue;
      }
      load_rows<D, kKeys, kNT>(kc, bt, bs, it.kv_head, a.num_kv_heads, k0, it.kv_end, k_s, tid);
      mbar_arrive_cp_async(full_k);
      load_rows<D, kKeys, kNT>(vc, bt, bs, it.kv_head, a.num_kv_heads, k0, it.kv_end, k_s + kTB, tid);
      mbar_arrive_cp_async(full_v);
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/// Query pair b of a persistent CTA (its two 64-row Q tiles for one item) and its barriers:
/// "full" (the stagers' arrivals) and "empty" (one arrival per consumer warp).
struct q_pairs {
  uint32_t q0, bars;
  __device__ __forceinline__ uint32_t tile(int local, int cw) const { return q0 + ((local % 2) * 2 + cw) * q_bytes<128>(); }
  __device__ __forceinline__ uint32_t full(int local) const { return bars + 8 * (local % 2); }
  __device__ __forceinline__ uint32_t empty(int local) const { return bars + 16 + 8 * (local % 2); }
  __device__ __forceinline__ static uint32_t parity(int local) { return uint32_t((local / 2) & 1); }
};

/// Warps 1-3 of a persistent CTA's producer warpgroup: the queries of the CTA's next item into
/// the free Q pair while the consumers still work on the current one.
template <class T, int D>
__device__ __forceinline__ void stage_queries(const attn_launch& a, const q_pairs& q, int items, int stride,
                                              int tid) {
  const int G = a.num_heads / a.num_kv_heads;
  int local = 0;
  for (int item = blockIdx.x; item < items; item += stride, ++local) {
    if (local >= 2) mbar_wait(q.empty(local), q.parity(local) ^ 1u);
    const attn_item it = a.items[item];
    if (a.q16) {  // rope wrote them 16-bit and scaled: copies only, all in flight at once
      for (int cw = 0; cw < 2; ++cw)
        copy_q16_sw128<T, D, kQStagers>(a, it.q_begin, it.kv_head, it.q_len * G, q.tile(local, cw), tid, 64 * cw);
      mbar_arrive_cp_async(q.full(local));  // the consumers fence the async proxy after the wait
      continue;
    }
    for (int cw = 0; cw < 2; ++cw)
      stage_q_sw128<T, D, kQStagers>(a, it.q_begin, it.kv_head, it.q_len * G, q.tile(local, cw), tid, 64 * cw);
    fence_proxy_async();
    mbar_arrive(q.full(local));
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/// One CTA per SM walks items blockIdx.x, + gridDim.x, ..., its queries staged ahead by the
/// producer warpgroup's idle warps into two Q pairs, the K/V ring (filled by TMA) running on
/// across items.
template <class T, int D, int kKeys, int kStages>
__global__ void __launch_bounds__(384, 1) wgmma_prefill_pingpong(attn_launch a, const __grid_constant__ kv_tensor_maps maps) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  static_assert(D == 128, "q_pairs is laid out for D 128");
  constexpr int kQBufs = 2;
  const int items = a.counts[0], stride = int(gridDim.x);
  if (int(blockIdx.x) >= items) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t q0 = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q0 + kQBufs * 2 * q_bytes<D>();
  const kv_ring<D, kKeys, kStages> ring{kv0, kv0 + kStages * 2 * tile_bytes<D, kKeys>()};
  const q_pairs qp{q0, ring.bars + 24 * kStages};
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbar_init(ring.full_k(st), kProducerThreads);  // the producers' arrivals
      mbar_init(ring.full_v(st), kProducerThreads);
      mbar_init(ring.empty(st), 8);                  // one arrival per consumer warp
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(qp.full(b), kQStagers);
      mbar_init(qp.empty(b), 8);
    }
    fence_mbarrier_init();  // the copy engine completes transactions on these barriers
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid < kProducerThreads) produce_kv<D, kKeys, kStages>(a, maps, ring, items, stride, tid);
    else stage_queries<T, D>(a, qp, items, stride, tid - kProducerThreads);
    return;
  }
  setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1;  // consumer 0 or 1: rows 64 cw ..
  int n = 0;              // the CTA's tiles consumed so far (ring position)
  int local = 0;
  for (int item = blockIdx.x; item < items; item += stride, ++local) {
    const tile_ctx<kKeys> c(a, item, 4 * cw + warp, lane);
    const uint32_t q_s = qp.tile(local, cw);
    mbar_wait(qp.full(local), q_pairs::parity(local));
    fence_proxy_async();  // copies of a.q16 landed through the generic proxy
    // Turns: consumer cw issues after bar.sync (1 + cw) and then lets the other one go; the
    // second consumer's first arrival lets the first go first. The second skips its last
    // arrival, so every bar.sync meets exactly one arrival (within each item).
    if (cw == 1) named_arrive(1, 256);
    const auto full_k = [&](int t) {
      mbar_wait(ring.full_k(n + t), ring.parity(n + t));
      fence_proxy_async();
    };
    const auto full_v = [&](int t) {
      mbar_wait(ring.full_v(n + t), ring.parity(n + t));
      fence_proxy_async();
    };
    wg_rows<T, D, kKeys> w;
    w.init();
    uint32_t pf[kKeys / 16][4];
    {
      float s[kKeys / 2], p[kKeys / 2], corr[2];
      full_k(0);
      named_sync(1 + cw, 256);
      w.issue_scores(q_s, ring.k_tile(n), s);
      if (!(cw == 1 && c.ntiles == 1)) named_arrive(2 - cw, 256);
      wgmma_wait<0>();
      fence_regs(s);
      tile_exponentials(w, c, 0, s, p, corr, lane);
      w.pack(p, pf);
    }
    for (int t = 1; t < c.ntiles; ++t) {
      float s[kKeys / 2], p[kKeys / 2], corr[2];
      full_v(t - 1);
      full_k(t);
      named_sync(1 + cw, 256);
      w.issue_scores(q_s, ring.k_tile(n + t), s);
      w.issue_pv(pf, ring.v_tile(n + t - 1));
      if (!(cw == 1 && t == c.ntiles - 1)) named_arrive(2 - cw, 256);
      wgmma_wait<1>();  // S(t) done; P(t-1) V(t-1) may still run
      fence_regs(s);
      tile_exponentials(w, c, t, s, p, corr, lane);
      wgmma_wait<0>();
      fence_regs(w.o);
      fence_regs(p);
      if (lane == 0) mbar_arrive(ring.empty(n + t - 1));  // tile t-1's stage read
      w.rescale(corr);
      w.pack(p, pf);
    }
    full_v(c.ntiles - 1);
    w.issue_pv(pf, ring.v_tile(n + c.ntiles - 1));
    wgmma_wait<0>();
    fence_regs(w.o);
    if (lane == 0) {
      mbar_arrive(ring.empty(n + c.ntiles - 1));
      mbar_arrive(qp.empty(local));  // every S of this item has read its Q pair
    }
    w.store(a, c.it, c.valid, c.r0, lane);
    n += c.ntiles;
  }
#endif
}

template <class K>
int start(K kernel, int smem, int grid, const attn_launch& a, const kv_tensor_maps& maps, cudaStream_t s) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return int(e);
  if (grid > 0) kernel<<<grid, 384, smem, s>>>(a, maps);
  return int(cudaGetLastError());
}

/// One CTA per SM (capped by the items' upper bound).
int persistent_grid(const attn_launch& a) { return std::min(a.prefill_grid, current_sm_count()); }

template <int kKeys, int kStages>
int start_persistent(const attn_launch& a, const kv_tensor_maps& maps, cudaStream_t s) {
  using T = __nv_bfloat16;
  static_assert(kKeys == tc_prefill_key_tile, "the plan's window starts are multiples of the key tile");
  constexpr int smem = pingpong_smem_bytes<128, kKeys, kStages, 2>();
  static_assert(smem <= 227 * 1024, "over the H100/H200 shared memory per block");
  return start(wgmma_prefill_pingpong<T, 128, kKeys, kStages>, smem, persistent_grid(a), a, maps, s);
}

}  // namespace

int launch_wgmma_persistent(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (dt != act_dtype::bf16 || a.head_dim != 128) return int(cudaErrorInvalidValue);
  kv_tensor_maps maps{};
  // Without descriptors (no driver entry point, a cache outside a device allocation), the
  // 128-row items run on the cp.async kernel.
  if (!make_kv_tensor_maps(a.k_cache, a.v_cache, a.num_kv_heads, a.head_dim, a.block_size, &maps))
    return launch_wgmma_prefill(dt, a, prefill_kernel::wgmma_cp_async, s);
  return start_persistent<64, 4>(a, maps, s);
}

}  // namespace actorserve::gpu::cuda
