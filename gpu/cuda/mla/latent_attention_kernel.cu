// DeepSeek-V2's absorbed attention over the latent cache (mla_kernels.hpp), whose pieces of a
// split context merge within their thread-block cluster (or in the last piece's CTA). Every sum is
// in fp32; the cache and the outputs are the activation dtype. The latent norm and cache write are
// in latent_write_kernel.cu, the prefill's gather in prefill_kernels.cu,
// its attention in up_projected_attention_kernel.cu.
#include <algorithm>
#include <cmath>

#include "gpu/cuda/attention/tile_ops.cuh"
#include "gpu/cuda/cluster.cuh"
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mbarrier.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kHeads = mla_heads_per_cta;   ///< heads per CTA
constexpr int kKeys = 32;                   ///< keys per tile
constexpr int kThreads = 256;               ///< 8 warps, each 64 latent values of every head
constexpr int kWarps = kThreads / 32;
constexpr int kTiles = mla_max_rank / 64;   ///< mma n-tiles of 8 latent values a warp accumulates
/// Key tiles in the ring: the next tile's copies are in flight while this one's scores, softmax
/// and weighted sum run. Two stages keep two CTAs an SM (mla_ctas_per_sm).
constexpr int kStages = 2;
static_assert(mla_min_piece % kKeys == 0, "pieces of whole tiles");
/// Every warp computes a share of a tile's scores: warp w the dot products' half w / kKeyGroups
/// (of the 16-wide slices) for keys [8 (w % kKeyGroups), + 8), the halves summed by the softmax.
/// The next tile's copies come from the last warp on sm_90, one bulk copy a key row (a lane a
/// row) onto the stage's mbarrier, the rows' block-table entries read a tile ahead so that their
/// latency never delays that warp's scores; before sm_90 (no bulk copies, no mbarrier
/// transaction counts) from the warps from kFirstCopyWarp on, a warp a key row and a lane 16
/// bytes of it by cp.async.
constexpr int kKeyGroups = kKeys / 8;
constexpr int kDotHalves = kWarps / kKeyGroups;
static_assert(kDotHalves == 2, "two halves of each dot product, summed by the softmax");
constexpr int kCopyWarp = kWarps - 1;
constexpr int kFirstCopyWarp = kWarps / 2;
static_assert(kKeys <= 32, "a lane a key row");
/// Row stride (floats) of the score tiles in shared memory: kKeys plus 8, so that a half-warp's
/// 8-byte stores of the mma's C layout (8 rows of 4 lanes) meet no bank conflict.
constexpr int kScoreStride = kKeys + 8;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kBulkRows = false;
#else
constexpr bool kBulkRows = true;
#endif
/// Query float4s a thread loads at once, all in flight: the widest latent's 16 rows.
constexpr int kQLoads = (kHeads * (mla_max_rank + mla_max_rope_dim) / 4 + kThreads - 1) / kThreads;

/// Row stride (elements) of the query and key tiles in shared memory: W rounded up to the mma's k
/// of 16, plus 8, so that a warp's 32-bit fragment loads meet no bank conflict at V2's 576.
__host__ __device__ constexpr int tile_stride(int W) { return (W + 15) / 16 * 16 + 8; }

/// Dynamic shared memory: q [kHeads][stride] and kStages key tiles [kKeys][stride] of T, the
/// scores' halves [kDotHalves][kHeads][kScoreStride] (the first then the probabilities).
constexpr size_t attention_smem(int W) {
  return size_t(kHeads + kStages * kKeys) * tile_stride(W) * 2 + size_t(kDotHalves) * kHeads * kScoreStride * sizeof(float);
}
/// The static shared memory of attention_kernel (running max, sum and rescale, the merge's
/// weights, counted_last's flag) is under this; each CTA also takes 1 KB the runtime reserves.
constexpr size_t kStaticSmemBound = 2048, kReservedSmem = 1024, kSmemPerSm = 228 * 1024;
static_assert(mla_ctas_per_sm * (attention_smem(mla_max_rank + mla_max_rope_dim) + kStaticSmemBound + kReservedSmem) <=
                  kSmemPerSm,
              "mla_ctas_per_sm CTAs of the widest latent fit an SM's shared memory (sm_90)");

/// One bulk copy of `bytes` (a multiple of 16) from global `src` to shared `dst` (16-byte
/// aligned), its bytes counted on mbarrier `bar` (sm_90; a template, so that the passes for
/// older targets, which never use it, do not warn).
template <class T>
__device__ __forceinline__ void bulk_row(uint32_t dst, const T* src, uint32_t bytes, uint32_t bar) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

/// Partial vectors of one piece a thread of the merge loads at once, two pieces' in flight: V2's
/// 16 heads x 512 in two even sweeps of float4s. 8 would push attention_kernel from 106 registers
/// to the 128 cap of two CTAs an SM, with spills.
constexpr int kMergeVecs = 4;

/// Reads V floats at p (16-byte aligned for V = 4) from L2, past L1, which may hold no copy
/// older than another CTA's writes.
template <int V>
__device__ __forceinline__ void load_cg(const float* p, float (&x)[V]) {
  if constexpr (V == 4) {
    const float4 f = __ldcg(reinterpret_cast<const float4*>(p));
    x[0] = f.x;
    x[1] = f.y;
    x[2] = f.z;
    x[3] = f.w;
  } else {
    static_assert(V == 1, "one float or four");
    x[0] = __ldcg(p);
  }
}

/// The merge of the pieces of row t's heads [h0, h0 + heads) by the whole CTA, V floats a load:
/// out[h][d] = sum_s w[s][h] o_s[h][d] * inv[h] rounded to T. The heads' r-wide rows lie end to
/// end in each piece's partial_o, so a CTA-wide sweep of heads x r floats reads them coalesced.
template <class T, int V>
__device__ __forceinline__ void merge_rows(const latent_attention_args& a, int t, int h0, int heads, int pieces,
                                           const float* w_s, const float* inv_s) {
  const int r = a.rank, total = heads * r;
  const size_t piece = size_t(a.n) * a.num_heads * r;  // floats from one piece's rows to the next's
  const float* po = a.partial_o + (size_t(t) * a.num_heads + h0) * r;
  T* out = static_cast<T*>(a.out) + (size_t(t) * a.num_heads + h0) * r;
  for (int e0 = threadIdx.x * V; e0 < total; e0 += kThreads * kMergeVecs * V) {
    float o[kMergeVecs][V] = {};
    int hl[kMergeVecs];
#pragma unroll
    for (int k = 0; k < kMergeVecs; ++k) hl[k] = min(e0 + k * kThreads * V, total - 1) / r;
#pragma unroll 2
    for (int s = 0; s < pieces; ++s) {
      float x[kMergeVecs][V];
#pragma unroll
      for (int k = 0; k < kMergeVecs; ++k) {
        const int e = e0 + k * kThreads * V;
        if (e < total) load_cg<V>(po + s * piece + e, x[k]);
      }
#pragma unroll
      for (int k = 0; k < kMergeVecs; ++k) {
        if (e0 + k * kThreads * V >= total) continue;
        const float w = w_s[s * kHeads + hl[k]];
#pragma unroll
        for (int j = 0; j < V; ++j) o[k][j] += w * x[k][j];
      }
    }
#pragma unroll
    for (int k = 0; k < kMergeVecs; ++k) {
      const int e = e0 + k * kThreads * V;
      if (e >= total) continue;
      const float inv = inv_s[hl[k]];
#pragma unroll
      for (int j = 0; j < V; ++j) out[e + j] = from_f32<T>(o[k][j] * inv);
    }
  }
}

/// The `pieces` pieces of row t's heads [h0, h0 + kHeads) (those below H) merged and normalised
/// into out, by the whole CTA once every piece's partials are visible: with M the pieces' largest
/// max, out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s (every piece has keys).
/// Head h's merge weights over `pieces` pieces (by the thread of head h): w_s[s][h] = e^(m_s - M)
/// and inv_s[h] = 1 / sum_s w_s[s][h] l_s (0 for no keys), with m_s = max_of(s), l_s = sum_of(s)
/// the piece's running max and sum and M the largest m_s. Both merges take it, each reading the
/// pieces' (max, sum) from where it keeps them.
template <class MaxOf, class SumOf>
__device__ __forceinline__ void merge_weights(int h, int pieces, MaxOf max_of, SumOf sum_of, float* w_s,
                                              float* inv_s) {
  float mx = -INFINITY;
  for (int s = 0; s < pieces; ++s) mx = fmaxf(mx, max_of(s));
  float l = 0.0f;
  for (int s = 0; s < pieces; ++s) {
    const float ms = max_of(s);
    const float w = ms != -INFINITY ? expf(ms - mx) : 0.0f;
    w_s[s * kHeads + h] = w;
    l += w * sum_of(s);
  }
  inv_s[h] = l > 0.0f ? 1.0f / l : 0.0f;
}

template <class T>
__device__ void merge_pieces(const latent_attention_args& a, int t, int h0, int pieces) {
  __shared__ float w_s[mla_max_splits * kHeads];  // [piece][head]: e^(m_s - M)
  __shared__ float inv_s[kHeads];                 // 1 / sum_s e^(m_s - M) l_s, 0 for no keys
  const int H = a.num_heads, heads = min(kHeads, H - h0);
  const size_t piece = size_t(a.n) * H;  // (max, sum) pairs from one piece's rows to the next's
  if (threadIdx.x < heads) {
    const float* ml = a.partial_ml + (size_t(t) * H + h0 + threadIdx.x) * 2;
    merge_weights(
        threadIdx.x, pieces, [&](int s) { return __ldcg(ml + s * piece * 2); },
        [&](int s) { return __ldcg(ml + s * piece * 2 + 1); }, w_s, inv_s);
  }
  __syncthreads();
  // Rows of a multiple of 4 floats from a 16-byte aligned buffer load as float4.
  if (a.rank % 4 == 0 && reinterpret_cast<uintptr_t>(a.partial_o) % 16 == 0)
    merge_rows<T, 4>(a, t, h0, heads, pieces, w_s, inv_s);
  else
    merge_rows<T, 1>(a, t, h0, heads, pieces, w_s, inv_s);
}

/// Row stride (floats) of a CTA's unnormalised partial output in shared memory for the cluster
/// merge: r plus 8, so that the C layout's 8-byte stores of a half-warp (8 rows of 4 lanes) meet
/// no bank conflict and rows stay 16-byte aligned for r a multiple of 4.
__host__ __device__ constexpr int cluster_partial_stride(int r) { return r + 8; }

/// The cluster merge (latent_attention_args::cluster_merge): every CTA of the cluster (one per
/// split of row t's head group h0) holds its piece's unnormalised output in o_s ([kHeads]
/// [cluster_partial_stride(r)] floats) and its (max, sum) in m_s / l_s; after a cluster barrier
/// CTA `rank` of S merges its 1/S of the heads x r outputs from the first `pieces` CTAs' shared
/// memory, and a second barrier keeps every CTA's shared memory alive until all have read it.
template <class T>
__device__ void cluster_merge(const latent_attention_args& a, int t, int h0, int pieces, int rank, int S,
                              const float* o_s, const float* m_s, const float* l_s) {
  __shared__ float w_s[mla_max_splits * kHeads];  // [piece][head]: e^(m_s - M)
  __shared__ float inv_s[kHeads];                 // 1 / sum_s e^(m_s - M) l_s, 0 for no keys
  const int H = a.num_heads, heads = min(kHeads, H - h0), r = a.rank, os = cluster_partial_stride(r);
  cluster_sync();
  if (threadIdx.x < heads) {
    const int h = threadIdx.x;
    merge_weights(
        h, pieces, [&](int s) { return ld_cluster(cluster_smem_addr(m_s + h, s)); },
        [&](int s) { return ld_cluster(cluster_smem_addr(l_s + h, s)); }, w_s, inv_s);
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + (size_t(t) * H + h0) * r;
  if (r % 4 == 0) {
    // This CTA's float4s of the heads x r outputs, each from every piece's CTA (the loads unrolled
    // so that they are in flight together).
    const int n4 = heads * r / 4, per = (n4 + S - 1) / S, e1 = min(n4, (rank + 1) * per);
    for (int i = rank * per + threadIdx.x; i < e1; i += kThreads) {
      const int e = i * 4, h = e / r, d = e % r;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
      for (int s = 0; s < pieces; ++s) {
        const float4 x = ld_cluster4(cluster_smem_addr(o_s + h * os + d, s));
        const float w = w_s[s * kHeads + h];
        o.x += w * x.x;
        o.y += w * x.y;
        o.z += w * x.z;
        o.w += w * x.w;
      }
      const float inv = inv_s[h];
      out[e] = from_f32<T>(o.x * inv);
      out[e + 1] = from_f32<T>(o.y * inv);
      out[e + 2] = from_f32<T>(o.z * inv);
      out[e + 3] = from_f32<T>(o.w * inv);
    }
  } else {
    const int n = heads * r, per = (n + S - 1) / S, e1 = min(n, (rank + 1) * per);
    for (int e = rank * per + threadIdx.x; e < e1; e += kThreads) {
      const int h = e / r, d = e % r;
      float o = 0.0f;
      for (int s = 0; s < pieces; ++s) o += w_s[s * kHeads + h] * ld_cluster(cluster_smem_addr(o_s + h * os + d, s));
      out[e] = from_f32<T>(o * inv_s[h]);
    }
  }
  cluster_sync();
}

/// Row t's context cut into pieces (latent_attention_args): keys [0, context) in `count` pieces
/// of `piece` keys (whole tiles), the last one shorter; a padding row: no keys, one piece.
struct row_pieces {
  int context, piece, count;
};
__device__ __forceinline__ row_pieces pieces_of(const latent_attention_args& a, int t) {
  const int context = a.token_seqs[t] >= 0 ? a.positions[t] + 1 : 0;
  const int piece = (max((context + a.num_splits - 1) / a.num_splits, mla_min_piece) + kKeys - 1) / kKeys * kKeys;
  return {context, piece, max(1, (context + piece - 1) / piece)};
}

/// Grid (n, ceil(H / kHeads), num_splits) of kThreads. Scores and the weighted sum on tensor cores
/// (mma.sync m16n8k16, the CTA's 16 heads its rows): warp w accumulates latent values [64 w,
/// 64 w + 64) of every head in the mma's C layout (rows lane / 4 and lane / 4 + 8, values
/// 8 i + 2 (lane % 4) and the next of n-tile i). The key tiles stream through a kStages ring
/// (kBulkRows: bulk copies of key rows onto the stage's mbarrier on sm_90, else cp.async), tile
/// i + 1's in flight while tile i is used. With one piece the CTA writes its heads' normalised
/// output; with more, kCluster (a cluster of the grid's num_splits CTAs along z, one row's head
/// group) merges the pieces through the cluster's shared memory (cluster_merge; the CTAs past a
/// short context's pieces take their share of it), otherwise each CTA stores its piece's partials
/// and the last piece's CTA merges them.
template <class T, bool kCluster>
__global__ void __launch_bounds__(kThreads, mla_ctas_per_sm) attention_kernel(latent_attention_args a) {
  extern __shared__ float smem[];
  __shared__ float m_s[kHeads], l_s[kHeads], alpha_s[kHeads];
  __shared__ __align__(8) uint64_t full_s[kStages];  // a stage's tile has landed
  pdl_begin();
  const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z;
  const row_pieces rp = pieces_of(a, t);
  // A context shorter than num_splits pieces leaves this CTA no keys: it leaves, unless it is
  // needed for its share of a cluster merge.
  const bool idle = split >= rp.count;
  if (idle && (!kCluster || rp.count == 1)) return;
  const int r = a.rank, W = r + a.rope_dim, H = a.num_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = lane >> 2, c2 = (lane & 3) * 2;
  const int Ws = tile_stride(W), K16 = (W + 15) / 16 * 16;
  T* q_s = reinterpret_cast<T*>(smem);                                        // [kHeads][Ws]
  T* k_s = q_s + size_t(kHeads) * Ws;                                         // [kStages][kKeys][Ws]
  float* s_s = reinterpret_cast<float*>(k_s + size_t(kStages) * kKeys * Ws);  // [kDotHalves][kHeads][kScoreStride]
  const int seq = a.token_seqs[t];
  // This CTA's piece of the context: keys [kb, ke), in ntiles tiles.
  const int kb = split * rp.piece, ke = min(rp.context, kb + rp.piece);
  const int ntiles = idle ? 0 : (ke - kb + kKeys - 1) / kKeys;
  const int32_t* table = seq >= 0 ? a.block_tables + a.seqs[seq].bt_offset : nullptr;
  const T* cache = static_cast<const T*>(a.cache);
  const uint32_t k_addr = attn_dev::smem_addr(k_s), full0 = attn_dev::smem_addr(full_s);
  const auto src_of = [&](int key) {
    return cache + (size_t(table[key / a.block_size]) * a.block_size + key % a.block_size) * W;
  };
  // Bulk rows: the copying warp's lane's key row of tile `tile` (none past the piece's end),
  // read before it is needed.
  const auto row_of = [&](int tile) -> const T* {
    const int key = kb + tile * kKeys + lane;
    return warp == kCopyWarp && tile < ntiles && key < ke ? src_of(key) : nullptr;
  };
  const T* next_row = nullptr;
  // Tile `tile`'s key rows into ring stage `stage`. Bulk rows: lane 0 of the copying warp sets
  // the bytes the stage's barrier waits for, then each lane copies its row, read by row_of into
  // next_row, and reads its row of the tile after; rows past the piece's end are not copied (the
  // loop zeroes them in the last tile). cp.async: rows past the end are zero-filled (a zero
  // probability times a NaN would still be NaN).
  const auto issue = [&](int tile, int stage) {
    const int k0 = kb + tile * kKeys;
    if constexpr (kBulkRows) {
      if (warp != kCopyWarp) return;
      const int rows = min(kKeys, ke - k0);
      const uint32_t bar = full0 + stage * 8;
      if (lane == 0) dev::mbar_arrive_expect_tx(bar, uint32_t(rows * W * 2));
      __syncwarp();
      if (lane < rows) bulk_row(k_addr + uint32_t((stage * kKeys + lane) * Ws * 2), next_row, uint32_t(W * 2), bar);
      next_row = row_of(tile + 1);
    } else {
      for (int j = warp - kFirstCopyWarp; j >= 0 && j < kKeys; j += kWarps - kFirstCopyWarp) {
        const bool ok = k0 + j < ke;
        const T* src = ok ? src_of(k0 + j) : cache;
        const uint32_t dst = k_addr + uint32_t((stage * kKeys + j) * Ws * 2);
        for (int v = lane; v < W / 8; v += 32) attn_dev::cp_async16(dst + v * 16, src + (ok ? v * 8 : 0), ok ? 16 : 0);
      }
    }
  };
  if constexpr (kBulkRows) {
    if (threadIdx.x < kStages) dev::mbar_init(full0 + threadIdx.x * 8, 1);
    dev::fence_mbarrier_init();
    next_row = row_of(0);
    __syncthreads();
    for (int st = 0; st < kStages - 1 && st < ntiles; ++st) issue(st, st);
  } else {
    attn_dev::kv_ring_start<kStages>(ntiles, issue);
  }
  // The query's and the key tiles' columns [W, Ws) zeros (the scores' mma reads up to K16; the
  // copies write [0, W)); the query rounded to T for the tensor cores, every float4 of a thread
  // loaded before the first is stored (all in flight at once).
  const int pad = (Ws - W) / 8, qv = W / 4;  // 16-byte pieces past W a row; float4s of a query row
  for (int i = threadIdx.x; i < (kStages * kKeys + kHeads) * pad; i += kThreads)
    reinterpret_cast<uint4*>(q_s + size_t(i / pad) * Ws + W)[i % pad] = make_uint4(0, 0, 0, 0);
  float4 qx[kQLoads];
#pragma unroll
  for (int k = 0; k < kQLoads; ++k) {
    const int i = threadIdx.x + k * kThreads, hh = h0 + i / qv;
    qx[k] = i < kHeads * qv && hh < H && seq >= 0 && !idle
                ? __ldg(reinterpret_cast<const float4*>(a.q_abs + (size_t(t) * H + hh) * W) + i % qv)
                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int k = 0; k < kQLoads; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < kHeads * qv)
      *reinterpret_cast<uint2*>(q_s + size_t(i / qv) * Ws + (i % qv) * 4) =
          make_uint2(attn_dev::elem<T>::pack(qx[k].x, qx[k].y), attn_dev::elem<T>::pack(qx[k].z, qx[k].w));
  }
  if (threadIdx.x < kHeads) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  float acc[kTiles][4] = {};
  for (int tile = 0; tile < ntiles; ++tile) {
    // Tile `tile` has landed and every warp is done with the previous one: its stage takes the
    // next. A last tile's rows past the piece's end are zeroed first (a zero probability times a
    // NaN would still be NaN); no copy comes into its stage after it.
    const int stage = tile % kStages;
    const T* kt = k_s + size_t(stage) * kKeys * Ws;
    const int nk = min(kKeys, ke - (kb + tile * kKeys));
    if constexpr (kBulkRows) {
      dev::mbar_wait(full0 + stage * 8, uint32_t((tile / kStages) & 1));
      if (nk < kKeys)
        for (int i = threadIdx.x; i < (kKeys - nk) * (W / 8); i += kThreads)
          reinterpret_cast<uint4*>(k_s + size_t(stage * kKeys + nk + i / (W / 8)) * Ws)[i % (W / 8)] =
              make_uint4(0, 0, 0, 0);
      __syncthreads();
      if (tile + kStages - 1 < ntiles) issue(tile + kStages - 1, (tile + kStages - 1) % kStages);
    } else {
      attn_dev::kv_ring_next<kStages>(tile, ntiles, issue);
    }
    // Scores on tensor cores: warp w takes half w / kKeyGroups of the 16-wide slices of the dot
    // products of keys [8 (w % kKeyGroups), + 8) with the 16 heads, one mma.sync m16n8k16 a slice
    // (A: the query tile's rows, B: the keys' rows, both by ldmatrix; two slices a B load), even
    // and odd slices in two accumulators, and stores its half into s_s's half.
    static_assert(kHeads == 16, "the mma's 16 rows");
    {
      const int half = warp / kKeyGroups, key0 = (warp % kKeyGroups) * 8, slices = K16 / 16;
      const int per = (slices + kDotHalves - 1) / kDotHalves, s0 = half * per, s1 = min(slices, s0 + per);
      const uint32_t qa = attn_dev::smem_addr(q_s + size_t(lane % 16) * Ws + (lane / 16) * 8);
      const uint32_t kr = attn_dev::smem_addr(kt + size_t(key0 + lane % 8) * Ws + (lane / 8) * 8);
      float c0[4] = {}, c1[4] = {};
      for (int sl = s0; sl < s1; sl += 2) {
        uint32_t a0[4], a1[4], b0, b1, b2, b3;
        attn_dev::ldsm_x4(kr + sl * 32, b0, b1, b2, b3);  // keys' dims [16 sl, 16 sl + 32)
        attn_dev::ldsm_x4(qa + sl * 32, a0[0], a0[1], a0[2], a0[3]);
        attn_dev::elem<T>::mma(c0, a0, b0, b1);
        if (sl + 1 < s1) {
          attn_dev::ldsm_x4(qa + sl * 32 + 32, a1[0], a1[1], a1[2], a1[3]);
          attn_dev::elem<T>::mma(c1, a1, b2, b3);
        }
      }
      float* sh = s_s + half * kHeads * kScoreStride;
      *reinterpret_cast<float2*>(sh + grp * kScoreStride + key0 + c2) = make_float2(c0[0] + c1[0], c0[1] + c1[1]);
      *reinterpret_cast<float2*>(sh + (grp + 8) * kScoreStride + key0 + c2) = make_float2(c0[2] + c1[2], c0[3] + c1[3]);
    }
    __syncthreads();
    // Online softmax: a warp per head, a lane per key (scores past nk are -inf: exp gives 0).
    // A warp's heads side by side, so that their shuffle reductions overlap.
    static_assert(kKeys == 32, "a lane per key");
    constexpr int kWarpHeads = kHeads / kWarps;
    static_assert(kHeads % kWarps == 0, "heads spread evenly over the warps");
    float sv[kWarpHeads], mx[kWarpHeads], sum[kWarpHeads];
#pragma unroll
    for (int k = 0; k < kWarpHeads; ++k) {
      const int i = (warp + k * kWarps) * kScoreStride + lane;
      sv[k] = lane < nk ? (s_s[i] + s_s[kHeads * kScoreStride + i]) * a.scale : -INFINITY;
    }
#pragma unroll
    for (int k = 0; k < kWarpHeads; ++k) mx[k] = warp_max(sv[k]);
#pragma unroll
    for (int k = 0; k < kWarpHeads; ++k) {
      mx[k] = fmaxf(m_s[warp + k * kWarps], mx[k]);
      sv[k] = expf(sv[k] - mx[k]);
      s_s[(warp + k * kWarps) * kScoreStride + lane] = sv[k];
    }
#pragma unroll
    for (int k = 0; k < kWarpHeads; ++k) sum[k] = warp_sum(sv[k]);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < kWarpHeads; ++k) {
        const int hh = warp + k * kWarps;
        const float alpha = expf(m_s[hh] - mx[k]);  // exp(-inf) = 0 on the first tile
        m_s[hh] = mx[k];
        l_s[hh] = l_s[hh] * alpha + sum[k];
        alpha_s[hh] = alpha;
      }
    }
    __syncthreads();
    // The weighted sum of the keys' first r values: A the probabilities [16 heads][16 keys]
    // rounded to T, B the key rows by transposed 8 x 8 loads (keys past nk weigh 0).
    const float lo = alpha_s[grp], hi = alpha_s[grp + 8];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      acc[i][0] *= lo;
      acc[i][1] *= lo;
      acc[i][2] *= hi;
      acc[i][3] *= hi;
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const float* p0 = s_s + grp * kScoreStride + kk * 16 + c2;
      const float* p1 = p0 + 8 * kScoreStride;
      const uint32_t pf[4] = {attn_dev::elem<T>::pack(p0[0], p0[1]), attn_dev::elem<T>::pack(p1[0], p1[1]),
                              attn_dev::elem<T>::pack(p0[8], p0[9]), attn_dev::elem<T>::pack(p1[8], p1[9])};
      const int key = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int i = 0; i < kTiles; i += 2) {
        const int d0 = (warp * kTiles + i) * 8;  // n-tiles i and i + 1: values [d0, d0 + 16)
        if (d0 >= r) break;
        uint32_t b0, b1, b2, b3;
        attn_dev::ldsm_x4_t(attn_dev::smem_addr(kt + size_t(key) * Ws + d0 + (lane >> 4) * 8), b0, b1, b2, b3);
        attn_dev::elem<T>::mma(acc[i], pf, b0, b1);
        attn_dev::elem<T>::mma(acc[i + 1], pf, b2, b3);
      }
    }
  }
  __syncthreads();
  // This thread's two rows of the C layout: heads grp and grp + 8 of the CTA's. For the cluster
  // merge, the piece's unnormalised output goes to shared memory over the key ring, free now.
  const bool whole = rp.count == 1;
  float* o_s = reinterpret_cast<float*>(k_s);
  static_assert(kHeads * cluster_partial_stride(mla_max_rank) * 4 <= kStages * kKeys * tile_stride(mla_max_rank) * 2,
                "the partial output fits the key ring (r + 8 <= tile_stride(r + dr) for every r)");
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int hl = grp + 8 * half, h = h0 + hl;
    if (h >= H) continue;
    const size_t row = size_t(t) * H + h;
    if (whole) {
      const float l = l_s[hl], inv = l > 0.0f ? 1.0f / l : 0.0f;  // a padding row has no keys: zeros
      T* out = static_cast<T*>(a.out) + row * r;
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int d = (warp * kTiles + i) * 8 + c2;
        if (d >= r) break;
        out[d] = from_f32<T>(acc[i][2 * half] * inv);
        out[d + 1] = from_f32<T>(acc[i][2 * half + 1] * inv);
      }
      continue;
    }
    if constexpr (kCluster) {
      float* os = o_s + hl * cluster_partial_stride(r);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int d = (warp * kTiles + i) * 8 + c2;
        if (d >= r) break;
        *reinterpret_cast<float2*>(os + d) = make_float2(acc[i][2 * half], acc[i][2 * half + 1]);
      }
      continue;
    }
    const size_t prow = size_t(split) * a.n * H + row;
    float* po = a.partial_o + prow * r;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int d = (warp * kTiles + i) * 8 + c2;
      if (d >= r) break;
      po[d] = acc[i][2 * half];
      po[d + 1] = acc[i][2 * half + 1];
    }
    if (warp == 0 && (lane & 3) == 0) {
      a.partial_ml[prow * 2] = m_s[hl];
      a.partial_ml[prow * 2 + 1] = l_s[hl];
    }
  }
  if (whole) return;
  if constexpr (kCluster) {
    cluster_merge<T>(a, t, h0, rp.count, split, gridDim.z, o_s, m_s, l_s);
    return;
  }
  // The CTA that stores the last piece of this row's head group merges every piece.
  if (counted_last(a.split_counters + size_t(t) * gridDim.y + blockIdx.y, rp.count)) merge_pieces<T>(a, t, h0, rp.count);
}

/// The dynamic shared memory, the largest carveout (the keys come by bulk copies or cp.async.cg, past L1)
/// and, for the cluster form, clusters past 8 CTAs, set once per kernel for the widest latent:
/// never inside a graph capture after the first launch. Returns the largest cluster the kernel
/// launches with (16 where the GPU places a cluster of 16 such CTAs, else 8; 1 without
/// clusters), or 0 on an error.
template <class T, bool kCluster>
int prepare_attention_kernel() {
  static const int largest = [] {
    const int smem = int(attention_smem(mla_max_rank + mla_max_rope_dim));
    if (cudaFuncSetAttribute(attention_kernel<T, kCluster>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
            cudaSuccess ||
        cudaFuncSetAttribute(attention_kernel<T, kCluster>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             int(cudaSharedmemCarveoutMaxShared)) != cudaSuccess)
      return 0;
    if (!kCluster) return 1;
    if (cudaFuncSetAttribute(attention_kernel<T, kCluster>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return 8;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, mla_max_splits);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = size_t(smem);
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = mla_max_splits;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, attention_kernel<T, kCluster>, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      clusters = 0;
    }
    return clusters > 0 ? mla_max_splits : 8;
  }();
  return largest;
}

/// attention_kernel<T, true> as clusters of grid.z CTAs along z, a programmatic dependent of the
/// kernel before it where programmatic_launch() is on.
template <class T>
cudaError_t launch_cluster(const latent_attention_args& a, dim3 grid, size_t smem, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = grid.z;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = programmatic_launch() ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, attention_kernel<T, true>, a);
}

}  // namespace

int latent_attention(act_dtype dt, const latent_attention_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  const int W = a.rank + a.rope_dim;
  if (a.rank > mla_max_rank || a.rope_dim > mla_max_rope_dim || W % 8 != 0 || a.num_splits < 1 ||
      a.num_splits > mla_max_splits ||
      (a.num_splits > 1 && !a.cluster_merge && (!a.partial_o || !a.partial_ml || !a.split_counters)))
    return int(cudaErrorInvalidValue);
  const size_t smem = attention_smem(W);
  AS_DISPATCH_ACT(dt, {
    if (a.cluster_merge && a.num_splits > 1) {
      const int largest = prepare_attention_kernel<T, true>();
      if (largest == 0) return int(cudaErrorInvalidValue);
      // More splits than the GPU places in one cluster run as that many (fewer, longer pieces).
      latent_attention_args c = a;
      c.num_splits = std::min(a.num_splits, largest);
      const dim3 grid(a.n, (a.num_heads + kHeads - 1) / kHeads, c.num_splits);
      return int(launch_cluster<T>(c, grid, smem, s));
    }
    if (prepare_attention_kernel<T, false>() == 0) return int(cudaErrorInvalidValue);
    const dim3 grid(a.n, (a.num_heads + kHeads - 1) / kHeads, a.num_splits);
    return int(launch_pdl_smem(attention_kernel<T, false>, grid, dim3(kThreads), smem, s, a));
  });
}

}  // namespace actorserve::gpu::cuda
