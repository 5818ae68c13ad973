// Prefill variants 10 and 13 (prefill_wgmma.hpp; bf16, head dim 128): FlashAttention-3's
// scheduling on Hopper over 128-row prefill items (tokens x heads of one GQA group, one KV
// head). A CTA has three warpgroups: warpgroup 0 produces, filling a kStages-deep K/V ring with
// cp.async (K and V of a stage signal separate "full" mbarriers, so S can start before V lands)
// and hands registers to the consumers (setmaxnreg); warpgroups 1 and 2 consume, 64 query rows
// each, against the same K/V tiles.
//
// Each consumer overlaps inside itself: it issues S(t) = Q K(t)^T and O += P(t-1) V(t-1)
// back to back, waits for S(t) only, runs the softmax of S(t) while P V is still in flight,
// then waits for P V before it rescales O and packs P(t). Nothing touches O or the P fragments
// between P V's issue and its wait (ptxas would serialise the MMAs: C7515; it does not here).
// The two consumers also take turns to issue their MMAs (named barriers 1 and 2, 256 threads:
// one waits in bar.sync, the other arrives), so one warpgroup's softmax runs under the other's
// MMAs. Both walk the same tiles (the lower rows' extra diagonal tile is masked), so their
// barrier counts match. Measured on the H200: correct, but slower than variant 4
// (docs/attention.md); without the turns (a variant measured and removed) it was as fast.
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/prefill_wgmma_rows.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

/// Registers per thread after setmaxnreg. The consumers can only take what the producer gave
/// back from the 168 x 384 allocated at launch (__launch_bounds__(384, 1)): 128 x 56 + 256 x 224
/// = 168 x 384 (more, and setmaxnreg.inc waits forever: seen as a hang on the H200). ptxas -v:
/// no spills; with 40 / 232 or 24 / 240 the producer's copy loop spilled.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * 384, "setmaxnreg.inc would wait forever");

/// Dynamic shared memory: 1 KiB alignment slack, two Q tiles, the ring, 3 mbarriers per stage.
template <int D, int kKeys, int kStages>
constexpr int pingpong_smem_bytes() {
  return 1024 + 2 * q_bytes<D>() + kStages * 2 * tile_bytes<D, kKeys>() + 24 * kStages;
}

template <class T, int D, int kKeys, int kStages>
__global__ void __launch_bounds__(384, 1) wgmma_prefill_pingpong(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kTB = tile_bytes<D, kKeys>();
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t q0 = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q0 + 2 * q_bytes<D>();
  // Per stage st: full_k at bars + 8 st, full_v at + 8 (kStages + st), empty at + 8 (2 kStages + st).
  const uint32_t bars = kv0 + kStages * 2 * kTB;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bars + 8 * st, 128);                  // full K: the producers' cp.async arrivals
      mbar_init(bars + 8 * (kStages + st), 128);      // full V
      mbar_init(bars + 8 * (2 * kStages + st), 8);    // empty: one arrival per consumer warp
    }
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    const attn_item it = a.items[blockIdx.x];
    const int ntiles = (it.kv_end - it.kv_begin + kKeys - 1) / kKeys;
    const int32_t* bt = a.block_tables + a.seqs[it.seq].bt_offset;
    const auto* kc = static_cast<const uint16_t*>(a.k_cache);
    const auto* vc = static_cast<const uint16_t*>(a.v_cache);
    for (int t = 0; t < ntiles; ++t) {
      const int st = t % kStages;
      if (t >= kStages) mbar_wait(bars + 8 * (2 * kStages + st), uint32_t((t / kStages - 1) & 1));
      const uint32_t k_s = kv0 + st * 2 * kTB;
      const int k0 = it.kv_begin + t * kKeys;
      load_rows<D, kKeys, 128>(kc, bt, a.block_size, it.kv_head, a.num_kv_heads, k0, it.kv_end, k_s, tid);
      mbar_arrive_cp_async(bars + 8 * st);
      load_rows<D, kKeys, 128>(vc, bt, a.block_size, it.kv_head, a.num_kv_heads, k0, it.kv_end, k_s + kTB, tid);
      mbar_arrive_cp_async(bars + 8 * (kStages + st));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;                                 // consumer 0 or 1: rows 64 cw ..
    const tile_ctx<kKeys> c(a, 4 * cw + warp, lane);
    const uint32_t q_s = q0 + cw * q_bytes<D>();
    stage_q_sw128<T, D, 128>(a, c.it.q_begin, c.it.kv_head, c.valid, q_s, tid & 127, 64 * cw);
    fence_proxy_async();
    named_sync(3 + cw, 128);
    // Turns: consumer cw issues after bar.sync (1 + cw) and then lets the other one go; the
    // second consumer's first arrival lets the first go first. The second skips its last
    // arrival, so every bar.sync meets exactly one arrival.
    if (cw == 1) named_arrive(1, 256);
    const auto full_k = [&](int t) {
      mbar_wait(bars + 8 * (t % kStages), uint32_t((t / kStages) & 1));
      fence_proxy_async();
    };
    const auto full_v = [&](int t) {
      mbar_wait(bars + 8 * (kStages + t % kStages), uint32_t((t / kStages) & 1));
      fence_proxy_async();
    };
    const auto k_tile = [&](int t) { return kv0 + (t % kStages) * 2 * kTB; };
    wg_rows<T, D, kKeys> w;
    w.init();
    uint32_t pf[kKeys / 16][4];
    {
      float s[kKeys / 2], p[kKeys / 2], corr[2];
      full_k(0);
      named_sync(1 + cw, 256);
      w.issue_scores(q_s, k_tile(0), s);
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
      w.issue_scores(q_s, k_tile(t), s);
      w.issue_pv(pf, k_tile(t - 1) + kTB);
      if (!(cw == 1 && t == c.ntiles - 1)) named_arrive(2 - cw, 256);
      wgmma_wait<1>();  // S(t) done; P(t-1) V(t-1) may still run
      fence_regs(s);
      tile_exponentials(w, c, t, s, p, corr, lane);
      wgmma_wait<0>();
      fence_regs(w.o);
      fence_regs(p);
      if (lane == 0) mbar_arrive(bars + 8 * (2 * kStages + (t - 1) % kStages));  // stage t-1 read
      w.rescale(corr);
      w.pack(p, pf);
    }
    full_v(c.ntiles - 1);
    w.issue_pv(pf, k_tile(c.ntiles - 1) + kTB);
    wgmma_wait<0>();
    fence_regs(w.o);
    w.store(a, c.it, c.valid, c.r0, lane);
  }
#endif
}

template <class K>
int start(K kernel, int smem, const attn_launch& a, cudaStream_t s) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return int(e);
  if (a.prefill_grid > 0) kernel<<<a.prefill_grid, 384, smem, s>>>(a);
  return int(cudaGetLastError());
}

}  // namespace

int launch_wgmma_pingpong(act_dtype dt, const attn_launch& a, int variant, cudaStream_t s) {
  if (dt != act_dtype::bf16 || a.head_dim != 128) return int(cudaErrorInvalidValue);
  using T = __nv_bfloat16;
  if (variant == 13) return start(wgmma_prefill_pingpong<T, 128, 128, 2>, pingpong_smem_bytes<128, 128, 2>(), a, s);
  return start(wgmma_prefill_pingpong<T, 128, 64, 4>, pingpong_smem_bytes<128, 64, 4>(), a, s);
}

}  // namespace actorserve::gpu::cuda
