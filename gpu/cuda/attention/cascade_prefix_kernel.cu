// Cascade attention's shared-prefix pass (docs/attention.md, "Cascade attention"): an item's rows
// are the query heads of one KV head of up to cascade_prefix_rows / G group members (gathered:
// member m's decode token and head h are row m x G + h), streamed over a piece of the shared
// prefix's keys in 64-token tiles, so each K/V tile is read once for all of them. The math is the
// mma.sync prefill's (warp_rows: 4 warps x 16 rows, 2-stage cp.async ring), without a causal mask:
// every member sees every prefix key. Each row's normalised output and log2-sum-exp go to its
// member's partial slot, which launch_lse_combine merges with the member's suffix pieces.
#include <cmath>

#include "gpu/cuda/attention/launch.hpp"
#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int NW = 4, kTile = 64, kStages = 2;
static_assert(cascade_prefix_rows == NW * 16, "the plan's prefix rows are the kernel's");

template <int D>
constexpr int prefix_smem_bytes() { return kStages * 2 * kTile * D * 2 + NW * 16 * D * 2; }

/// Writes the item's gathered query rows into a swizzled [rows, D] tile as T, scaled into log2
/// units; rows >= valid are zeros. Every load is issued before the first store, so the member
/// rows' two dependent loads (its token, then its queries) are waited for once, not per chunk.
template <class T, int D, int NT>
__device__ __forceinline__ void stage_member_q(const attn_launch& a, const attn_item& it, int valid, uint32_t q_s,
                                               int tid) {
  constexpr int kChunks = NW * 16 * (D / 8), kPer = kChunks / NT;
  static_assert(kChunks % NT == 0, "the Q tile's chunks divide over the threads");
  const float sc = a.scale * 1.4426950408889634f;
  float4 x[kPer][2];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * NT + tid, r = idx / (D / 8), c = idx % (D / 8);
    x[i][0] = x[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) {
      const float4* src = member_q_src(a, it, r, c, D);
      x[i][0] = __ldg(src);
      x[i][1] = __ldg(src + 1);
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * NT + tid;
    st_shared16(q_s + swz<D>(idx / (D / 8), idx % (D / 8)), pack8<T>(x[i][0], x[i][1], sc));
  }
}

template <class T, int D>
__global__ void __launch_bounds__(NW * 32, 2) cascade_prefix_kernel(attn_launch a) {
  constexpr int kTileBytes = kTile * D * 2, kThreads = NW * 32;
  extern __shared__ uint4 smem_raw[];
  const int first = a.counts[0] + a.counts[2], n_items = a.counts[3];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kStages * 2 * kTileBytes;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
    const attn_item it = a.items[first + i];
    const int valid = it.q_len * G;
    const int32_t* bt = a.block_tables + it.bt_offset;
    const int ntiles = (it.kv_end - it.kv_begin + kTile - 1) / kTile;
    __syncthreads();  // the previous item is done with the stages and the Q tile
    const auto issue = [&](int tile, int stage) {
      const uint32_t dst = s0 + stage * 2 * kTileBytes;
      load_kv_tile<D, kTile, kThreads>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                                       it.kv_begin + tile * kTile, it.kv_end, dst, dst + kTileBytes, tid);
    };
    kv_ring_start<kStages>(ntiles, issue);
    stage_member_q<T, D, kThreads>(a, it, valid, q_s, tid);
    __syncthreads();
    warp_rows<T, D> w;
    w.init(q_s + warp * 16 * D * 2, lane);
    for (int t = 0; t < ntiles; ++t) {
      kv_ring_next<kStages>(t, ntiles, issue);
      if (warp * 16 >= valid) continue;  // a warp of padding rows only
      const uint32_t k_s = s0 + (t % kStages) * 2 * kTileBytes;
      w.template step<kTile>(k_s, k_s + kTileBytes, 0, it.kv_begin + t * kTile, it.kv_end, lane);
    }
    w.finish_sums();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + lane / 4 + h * 8;
      if (r >= valid) continue;
      write_prefix_partial<D>(a, it, r, lane, w.l[h], w.m[h],
                              [&](int n) { return make_float2(w.o[n][2 * h], w.o[n][2 * h + 1]); });
    }
  }
}

template <class T, int D>
int launch(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = prefix_smem_bytes<D>();
  static const cudaError_t configured =
      cudaFuncSetAttribute(cascade_prefix_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (configured != cudaSuccess) return int(configured);
  cascade_prefix_kernel<T, D><<<a.prefix_grid, NW * 32, smem, s>>>(a);
  return int(cudaGetLastError());
}

}  // namespace

int launch_cascade_prefix(act_dtype dt, const attn_launch& a, bool wgmma, cudaStream_t s) {
  if (wgmma) return launch_cascade_prefix_wgmma(dt, a, s);
  if (a.prefix_grid <= 0) return 0;
  if (a.num_heads / a.num_kv_heads > tc_partial_rows) return int(cudaErrorInvalidValue);
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, s) : launch<__half, 128>(a, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, s) : launch<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
