// DeepSeek-V2's up-projected prefill attention (mla_kernels.hpp) on tensor cores, in the
// FlashAttention-2 form of the per-head prefill (attention/prefill_kernel.cu: mma.sync m16n8k16,
// warp_rows' online softmax in fp32, a 2-stage cp.async ring of 64-key tiles): a CTA of 8 warps
// takes 128 queries of one head of one piece (mla_up_projected_plan) and streams that head's keys
// (qk wide) and values (dv wide) from the expanded [context][H][.] rows; each warp skips the
// tiles its queries cannot see; 128 queries a CTA read each head's keys and values from L2 half
// as often as 64 (docs/attention.md, Decisions). The widths are padded to a kernel's (kDk, kDv)
// with zeros in shared memory.
#include <cmath>

#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  ///< queries a CTA
static_assert(kRows == mla_up_projected_rows, "the plan's query tiles are the kernel's");
constexpr int kTile = 64;           ///< keys a stage
constexpr int kStages = 2;          ///< 128 KiB at V2's widths: one CTA an SM

template <int kDk, int kDv>
constexpr int smem_bytes() {
  return kStages * kTile * (kDk + kDv) * 2 + kRows * kDk * 2;
}

/// Copies rows [r0, r0 + kN) of one head's [.][H][width] operand into a swizzled tile of rows of
/// kD elements, zeros past `rows_end` and past `width` (a multiple of 8).
template <int kD, int kN>
__device__ __forceinline__ void load_rows(const uint16_t* src, int H, int head, int width, int r0, int rows_end,
                                          uint32_t dst, int tid) {
  constexpr int kChunks = kD / 8;
  static_assert(kN * kChunks % kThreads == 0, "the copies divide evenly");
  const int chunks = width / 8;
#pragma unroll
  for (int i = 0; i < kN * kChunks / kThreads; ++i) {
    const int idx = i * kThreads + tid, r = idx / kChunks, c = idx % kChunks;
    const bool ok = r0 + r < rows_end && c < chunks;
    const uint16_t* p = ok ? src + (size_t(r0 + r) * H + head) * width + c * 8 : src;
    cp_async16(dst + swz<kD>(r, c), p, ok ? 16 : 0);
  }
}

/// Grid (items, H): item blockIdx.x of the launch (a query tile of a piece, longest first).
template <class T, int kDk, int kDv>
__global__ void __launch_bounds__(kThreads, 1) up_projected_attention_kernel(const __grid_constant__
                                                                              mla_up_projected_args a) {
  extern __shared__ uint4 smem_raw[];
  dev::pdl_begin();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, H = a.num_heads, head = blockIdx.y;
  const mla_up_projected_item item = a.launch.items[blockIdx.x];
  const mla_up_projected_piece& p = a.launch.pieces[item.piece];
  const int q0 = item.tile * kRows, valid = min(kRows, p.queries - q0);
  const int first = p.context - p.queries;  // position of the piece's first query
  const int keys = first + q0 + valid;      // the CTA's queries see keys [0, keys)
  const int ntiles = (keys + kTile - 1) / kTile;
  constexpr int kKBytes = kTile * kDk * 2, kStageBytes = kTile * (kDk + kDv) * 2;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kStages * kStageBytes;
  const size_t kv0 = size_t(p.kv_row) * H;  // the piece's first context row
  const auto* k = static_cast<const uint16_t*>(a.k) + kv0 * a.qk_dim;
  const auto* v = static_cast<const uint16_t*>(a.v) + kv0 * a.v_dim;
  const auto* q = static_cast<const uint16_t*>(a.q) + size_t(p.q_row) * H * a.qk_dim;
  load_rows<kDk, kRows>(q, H, head, a.qk_dim, q0, p.queries, q_s, tid);
  cp_async_commit();
  const auto issue = [&](int tile, int stage) {
    const uint32_t dst = s0 + stage * kStageBytes;
    load_rows<kDk, kTile>(k, H, head, a.qk_dim, tile * kTile, keys, dst, tid);
    load_rows<kDv, kTile>(v, H, head, a.v_dim, tile * kTile, keys, dst + kKBytes, tid);
  };
  kv_ring_start<kStages>(ntiles, issue);
  cp_async_wait<kStages - 1>();  // the queries have landed (the ring's first tiles may not have)
  __syncthreads();
  warp_rows<T, kDk, row_tile<kDk>, kDv> w;
  w.init(q_s + warp * 16 * kDk * 2, lane);
  const int r0 = warp * 16 + lane / 4;
  const int qpos[2] = {first + q0 + min(r0, valid - 1), first + q0 + min(r0 + 8, valid - 1)};
  const int warp_first = first + q0 + min(warp * 16, valid - 1);
  const int warp_last = first + q0 + min(warp * 16 + 15, valid - 1);
  const float scale = a.scale * 1.4426950408889634f;  // the softmax in log2 units
  for (int t = 0; t < ntiles; ++t) {
    kv_ring_next<kStages>(t, ntiles, issue);
    const int k0 = t * kTile;
    if (k0 > warp_last) continue;  // causal: no query of this warp sees these keys
    const uint32_t k_s = s0 + (t % kStages) * kStageBytes;
    float sc[kTile / 8][4];
    w.template scores<kTile>(k_s, 0, lane, sc);
    const bool diagonal = k0 + kTile - 1 > warp_first;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] *= scale;
        if (diagonal && k0 + n * 8 + (lane % 4) * 2 + (e & 1) > qpos[e >> 1]) sc[n][e] = -INFINITY;
      }
    w.template accumulate<kTile>(sc, k_s + kKBytes, 0, lane);
  }
  w.finish_sums();
  T* out = static_cast<T*>(a.out) + size_t(p.q_row) * H * a.v_dim;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + h * 8;
    if (r >= valid) continue;
    const float inv = w.l[h] > 0.0f ? 1.0f / w.l[h] : 0.0f;
    T* dst = out + (size_t(q0 + r) * H + head) * a.v_dim + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n)
      if (n * 8 < a.v_dim)
        *reinterpret_cast<uint32_t*>(dst + n * 8) = elem<T>::pack(w.o[n][2 * h] * inv, w.o[n][2 * h + 1] * inv);
  }
}

template <int kDk, int kDv>
int launch(act_dtype dt, const mla_up_projected_args& a, cudaStream_t s) {
  constexpr int smem = smem_bytes<kDk, kDv>();
  const dim3 grid(a.launch.num_items, a.num_heads);
  AS_DISPATCH_ACT(dt, {
    static const cudaError_t configured = cudaFuncSetAttribute(
        up_projected_attention_kernel<T, kDk, kDv>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (configured != cudaSuccess) return int(configured);
    return int(dev::launch_pdl_smem(up_projected_attention_kernel<T, kDk, kDv>, grid, dim3(kThreads), smem, s, a));
  });
}

}  // namespace

bool mla_up_projected_supported(int qk_dim, int v_dim) {
  return qk_dim > 0 && v_dim > 0 && qk_dim % 8 == 0 && v_dim % 8 == 0 && qk_dim <= mla_max_up_projected_qk &&
         v_dim <= mla_max_up_projected_v;
}

int mla_up_projected_attention(act_dtype dt, const mla_up_projected_args& a, cudaStream_t s) {
  const mla_up_projected_launch& l = a.launch;
  if (l.num_items <= 0 || a.num_heads <= 0) return 0;
  if (!mla_up_projected_supported(a.qk_dim, a.v_dim) || l.num_pieces < 0 || l.num_pieces > mla_up_projected_max_pieces ||
      l.num_items > mla_up_projected_max_items)
    return int(cudaErrorInvalidValue);
  for (int i = 0; i < l.num_pieces; ++i)
    if (l.pieces[i].queries > l.pieces[i].context || l.pieces[i].queries < 0) return int(cudaErrorInvalidValue);
  for (int i = 0; i < l.num_items; ++i) {
    const mla_up_projected_item it = l.items[i];
    if (it.piece >= l.num_pieces || it.tile * kRows >= l.pieces[it.piece].queries) return int(cudaErrorInvalidValue);
  }
  // Two kernels: the widths of the small test models, and DeepSeek-V2's 192 / 128 (the widest).
  if (a.qk_dim <= 64 && a.v_dim <= 32) return launch<64, 32>(dt, a, s);
  return launch<mla_max_up_projected_qk, mla_max_up_projected_v>(dt, a, s);
}

}  // namespace actorserve::gpu::cuda
