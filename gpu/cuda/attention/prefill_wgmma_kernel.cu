// Causal, variable-length prefill (and chunked prefill over a cached prefix) on Hopper's
// warpgroup MMAs. A CTA takes one prefill item: 64 query rows (tokens x heads of one GQA group)
// against the paged K/V of their KV head, in 64-key tiles. One consumer warpgroup computes
// S = Q K^T with wgmma from shared memory (Q and K K-major, 128-byte swizzle), the online softmax
// in exp2 on the accumulators, then O += P V with P from registers and V as an MN-major operand:
// one tile in turn is serial_tile (prefill_wgmma_rows.cuh), shared by every kernel here.
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

#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/prefill_wgmma_rows.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

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
    serial_tile(w, c, t, q_s, k_s, k_s + kTB, lane);
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
  const auto load = [&](int k0, uint32_t k_s) {
    load_kv<D, kKeys, 128>(kc, vc, bt, a.block_size, c.it.kv_head, a.num_kv_heads, k0, c.it.kv_end, k_s, k_s + kTB,
                           tid);
  };
  load(c.it.kv_begin, kv0);
  cp_async_commit();
  stage_q_sw128<T, D, 128>(a, c.it.q_begin, c.it.kv_head, c.valid, q_s, tid);
  wg_rows<T, D, kKeys> w;
  w.init();
  for (int t = 0; t < c.ntiles; ++t) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile t (and Q) in shared memory for every thread; tile t - 1 fully read
    if (t + 1 < c.ntiles) load(c.it.kv_begin + (t + 1) * kKeys, kv0 + ((t + 1) % kStages) * 2 * kTB);
    cp_async_commit();
    const uint32_t k_s = kv0 + (t % kStages) * 2 * kTB;
    serial_tile(w, c, t, q_s, k_s, k_s + kTB, lane);
  }
  w.store(a, c.it, c.valid, c.r0, lane);
#endif
}

/// Variant 9 (measured: correct, slower than 4; docs/attention.md): items of up to 128 query
/// rows, as the planner cuts them for it. Two warpgroups take 64 rows each against the same K/V tiles,
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
    serial_tile(w, c, t, q_s, k_s, k_s + kTB, lane);
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
  if (wgmma_paired_variant(variant))  // 9, and the pingpong variants where they are not built
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
  if (wgmma_pingpong_variant(variant) && dt == act_dtype::bf16 && a.head_dim == 128)
    return launch_wgmma_pingpong(dt, a, variant, s);
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, variant, s) : launch<__half, 128>(a, variant, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, variant, s) : launch<__half, 64>(a, variant, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
