// Causal, variable-length prefill (and chunked prefill over a cached prefix) on Hopper's
// warpgroup MMAs, over items of up to 128 query rows (tokens x heads of one GQA group) against
// the paged K/V of their KV head, in 64-key tiles. Each of two warpgroups takes 64 rows and
// computes S = Q K^T with wgmma from shared memory (Q and K K-major, 128-byte swizzle), the online
// softmax in exp2 on the accumulators, then O += P V with P from registers and V as an MN-major
// operand: one tile in turn is serial_tile (prefill_wgmma_rows.cuh). All 256 threads copy K/V
// through a 3-stage cp.async ring. This is prefill_kernel::wgmma_cp_async, and what the
// persistent kernel (prefill_pingpong_kernel.cu) falls back to without TMA descriptors.
// Built for sm_90a only: on other targets the kernels trap, and the host never selects them
// on a device that is not compute capability 9.x.
#include <cmath>

#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/prefill_wgmma_rows.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

/// Items of up to 128 query rows, as the planner cuts them for it. Two warpgroups take 64 rows
/// each against the same K/V tiles, so every tile read from L2 serves 128 rows; all 256 threads
/// copy through a kStages-stage cp.async ring; one CTA per SM. A warpgroup skips
/// the tiles none of its rows sees (and every tile when the item has no rows for it).
template <class T, int D, int kStages>
__global__ void __launch_bounds__(256, 1) wgmma_prefill_rows128(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kKeys = 64, kTB = tile_bytes<D, kKeys>();
  static_assert(kKeys == tc_prefill_key_tile, "the plan's window starts are multiples of the key tile");
  if (int(blockIdx.x) >= a.counts[0]) return;
  extern __shared__ uint4 smem_raw[];
  const uint32_t q0 = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q0 + 2 * q_bytes<D>();
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const tile_ctx<kKeys> c(a, 4 * wg + warp, lane);  // rows 64 wg + 16 warp + lane / 4 (+ 8)
  const int G = a.num_heads / a.num_kv_heads;
  const bool has_rows = c.valid > 64 * wg;
  const int wg_last = c.pos0 + min(64 * wg + 63, c.valid - 1) / G;  // the furthest-seeing row
  // The first key the warpgroup's first row sees (sliding window; INT32_MIN without one).
  const int wg_lo = window_first_key(c.pos0 + min(64 * wg, c.valid - 1) / G, a.window);
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
    // Causal: no row of this warpgroup sees these keys; window: all precede every row's window.
    if (!has_rows || k0 > wg_last || k0 + kKeys <= wg_lo) continue;
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
int launch(const attn_launch& a, cudaStream_t s) {
  return start(wgmma_prefill_rows128<T, D, 3>, 256, 1024 + 2 * q_bytes<D>() + 6 * tile_bytes<D, 64>(), a, s);
}

}  // namespace

bool wgmma_prefill_available() { return runs_wgmma(loaded_gpu_target()); }

int launch_wgmma_prefill(act_dtype dt, const attn_launch& a, prefill_kernel k, cudaStream_t s) {
  if (k == prefill_kernel::wgmma_tma_persistent && dt == act_dtype::bf16 && a.head_dim == 128)
    return launch_wgmma_persistent(dt, a, s);
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, s) : launch<__half, 128>(a, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, s) : launch<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
