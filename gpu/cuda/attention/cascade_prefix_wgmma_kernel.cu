// Cascade attention's shared-prefix pass on Hopper's warpgroup MMAs (docs/attention.md, "Cascade
// attention"): an item's rows are the query heads of one KV head of up to
// cascade_prefix_wgmma_rows / G group members (gathered: member m's decode token and head h are
// row m x G + h). Two warpgroups of 64 rows share each 64-key K/V tile of the prefix piece, read
// through a two-stage cp.async ring by all 256 threads, and run the wgmma prefill's tile
// (prefill_wgmma_rows.cuh: S = Q K^T, the online softmax in exp2, O += P V) without a causal
// mask: every member sees every prefix key, and only the last tile masks the keys past the
// piece. Each row's normalised output and log2-sum-exp go to its member's partial slot, as the
// mma.sync pass's do (cascade_prefix_kernel.cu). Built for sm_90a only: on other targets the
// kernel traps, and the backend selects it only where the wgmma prefill runs.
#include <cmath>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/launch.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/attention/prefill_wgmma_rows.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;
using namespace attn_dev::wg;

constexpr int kKeys = 64, kStages = 2, kThreads = 256;
static_assert(cascade_prefix_wgmma_rows == 2 * kRows, "the plan's prefix rows are the two warpgroups'");

/// The dynamic shared memory: 1 KiB of alignment slack, two warpgroups' Q tiles and kStages K/V
/// tile pairs (97 KiB at D = 128, leaving an SM room for a decode CTA beside it).
template <int D>
constexpr int smem_bytes() { return 1024 + 2 * q_bytes<D>() + kStages * 2 * tile_bytes<D, kKeys>(); }

/// Writes the item's gathered query rows [row0, row0 + 64) into a warpgroup's swizzled
/// [D / 64][64][64] tile as T, scaled into log2 units; rows >= valid are zeros. Every load is
/// issued before the first store, so the rows' two dependent loads (the member's token, then its
/// queries) are waited for once, not per chunk. The warpgroup's 128 threads share the work.
template <class T, int D>
__device__ __forceinline__ void stage_member_q(const attn_launch& a, const attn_item& it, int valid, uint32_t q_s,
                                               int tid, int row0) {
  constexpr int kChunks = kRows * (D / 8), kPer = kChunks / 128;
  static_assert(kChunks % 128 == 0, "the Q tile's chunks divide over the warpgroup");
  const float sc = a.scale * 1.4426950408889634f;
  float4 x[kPer][2];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * 128 + tid, row = row0 + idx / (D / 8), c = idx % (D / 8);
    x[i][0] = x[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < valid) {
      const float4* src = member_q_src(a, it, row, c, D);
      x[i][0] = __ldg(src);
      x[i][1] = __ldg(src + 1);
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * 128 + tid;
    st_shared16(q_s + sw128<kRows>(idx / (D / 8), idx % (D / 8)), pack8<T>(x[i][0], x[i][1], sc));
  }
}

/// Grid-stride over the prefix items [counts[0] + counts[2], + counts[3]) (one CTA an SM).
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) cascade_prefix_wgmma(attn_launch a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kTB = tile_bytes<D, kKeys>();
  extern __shared__ uint4 smem_raw[];
  const uint32_t q0 = (smem_addr(smem_raw) + 1023u) & ~1023u, kv0 = q0 + 2 * q_bytes<D>();
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int first = a.counts[0] + a.counts[2], n_items = a.counts[3];
  const uint32_t q_s = q0 + wg * q_bytes<D>();
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
    // This thread's item rows c.r0 and c.r0 + 8 (warp 4 wg + warp of the item's 8).
    const prefix_tile_ctx<kKeys> c(a, first + i, 4 * wg + warp, lane);
    const attn_item& it = c.it;
    const int valid = c.valid, ntiles = c.ntiles;
    const bool has_rows = valid > kRows * wg;
    const int32_t* bt = a.block_tables + it.bt_offset;
    const auto issue = [&](int tile) {
      const uint32_t k_s = kv0 + (tile % kStages) * 2 * kTB;
      load_kv<D, kKeys, kThreads>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads, it.kv_begin + tile * kKeys,
                                  it.kv_end, k_s, k_s + kTB, tid);
    };
    __syncthreads();  // the previous item is done with the stages and the Q tiles
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < ntiles) issue(st);
      cp_async_commit();
    }
    stage_member_q<T, D>(a, it, valid, q_s, tid & 127, kRows * wg);
    wg_rows<T, D, kKeys> w;
    w.init();
    for (int t = 0; t < ntiles; ++t) {
      cp_async_wait<kStages - 2>();
      fence_proxy_async();
      __syncthreads();  // tile t (and Q) in shared memory for every thread; tile t - 1 fully read
      if (t + kStages - 1 < ntiles) issue(t + kStages - 1);
      cp_async_commit();
      if (!has_rows) continue;
      const uint32_t k_s = kv0 + (t % kStages) * 2 * kTB;
      serial_tile(w, c, t, q_s, k_s, k_s + kTB, lane);
    }
    if (has_rows) w.store_partial(a, it, valid, c.r0, lane);
  }
#endif
}

template <class T, int D>
int launch(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = smem_bytes<D>();
  static const cudaError_t configured =
      cudaFuncSetAttribute(cascade_prefix_wgmma<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (configured != cudaSuccess) return int(configured);
  cascade_prefix_wgmma<T, D><<<a.prefix_grid, kThreads, smem, s>>>(a);
  return int(cudaGetLastError());
}

}  // namespace

int launch_cascade_prefix_wgmma(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.prefix_grid <= 0) return 0;
  if (a.num_heads / a.num_kv_heads > tc_partial_rows) return int(cudaErrorInvalidValue);
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, s) : launch<__half, 128>(a, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, s) : launch<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
