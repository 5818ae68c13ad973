// One-token GEMVs with the residual add + RMSNorm folded in (gemv_norm.hpp). The normed kernels
// run a grid of at most one wave of blocks; each block issues its first weight loads (and loads
// the norm weight), waits for the previous kernel, normalises the residual into shared
// memory once (replaying add_rmsnorm's reduction tree exactly), then loops over its groups of
// weight rows.
#include <cstdint>

#include "gpu/cuda/gemv_common.cuh"
#include "gpu/cuda/gemv_epilogue.cuh"
#include "gpu/cuda/gemv_norm.hpp"
#include "gpu/cuda/launch_knobs.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;

/// add_rmsnorm's block size for a row of `hidden` values (its launcher's choice).
__host__ __device__ constexpr int norm_threads(int hidden) { return hidden >= 1024 ? 1024 : ((hidden + 31) / 32) * 32; }

/// Dynamic shared memory of a normed kernel: the residual (fp32), x in dt, the per-thread and
/// per-warp sums of squares, each sub-block's partial sums.
size_t norm_smem_bytes(int hidden, int subs) {
  return size_t(hidden) * 6 + (1024 + 32) * sizeof(float) + size_t(subs) * sizeof(partials<1, 4>);
}

__device__ __forceinline__ uint32_t bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t bits(__half v) { return __half_as_ushort(v); }

/// Two values rounded to T, packed low then high (their order in memory).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return bits(from_f32<T>(lo)) | (bits(from_f32<T>(hi)) << 16);
}

/// Norm-weight values a thread loads before the dependency wait (float4 groups c = threadIdx.x +
/// j * blockDim.x, j < kWeightRegs; any further ones are loaded after it).
constexpr int kWeightRegs = 2;

/// Before the dependency wait: the norm weight (never written by earlier kernels) into registers.
__device__ __forceinline__ void load_norm_weight(const norm_input& in, float4 (&wreg)[kWeightRegs]) {
  const int q4 = in.hidden / 4;
  const float4* w4 = reinterpret_cast<const float4*>(in.weight);
#pragma unroll
  for (int j = 0; j < kWeightRegs; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    wreg[j] = c < q4 ? w4[c] : make_float4(0, 0, 0, 0);
  }
}

/// x[4c .. 4c + 3] = weight * (residual * rstd), rounded to T, as one 8-byte shared store.
template <class T>
__device__ __forceinline__ void store_normed(T* xs, int c, const float4& v, const float4& wt, float rstd) {
  *reinterpret_cast<uint2*>(xs + 4 * c) = make_uint2(pack2<T>(wt.x * (v.x * rstd), wt.y * (v.y * rstd)),
                                                     pack2<T>(wt.z * (v.z * rstd), wt.w * (v.w * rstd)));
}

/// xs = rmsnorm(residual) * weight rounded to T, as add_rmsnorm computes it: add_rmsnorm's thread
/// t (of norm_threads(hidden)) sums v[t + j * threads]^2 with fmas in order of j, its warps sum
/// with warp_sum, and block_sum adds the warp sums with one more warp_sum. Each of this block's
/// threads plays some of those threads and warps, so the sum (and rstd) are bit-identical. The
/// residual comes into shared memory first, kBatch loads in flight per thread.
template <class T>
__device__ __forceinline__ void normalise_into(const norm_input& in, const float4 (&wreg)[kWeightRegs], float* res_s,
                                               T* xs, float* part, float* wsum) {
  const int hidden = in.hidden, nt = norm_threads(hidden), q4 = hidden / 4;
  const float4* r4 = reinterpret_cast<const float4*>(in.residual);
  float4* s4 = reinterpret_cast<float4*>(res_s);
  constexpr int kBatch = 2;
  const int threads = blockDim.x, warps = threads / 32;
  for (int c0 = threadIdx.x; c0 < q4; c0 += threads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int c = c0 + u * threads;
      if (c < q4) v[u] = r4[c];
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int c = c0 + u * threads;
      if (c < q4) s4[c] = v[u];
    }
  }
  __syncthreads();
  for (int vt = threadIdx.x; vt < nt; vt += threads) {
    float ss = 0.0f;
    for (int k = vt; k < hidden; k += nt) ss = fmaf(res_s[k], res_s[k], ss);
    part[vt] = ss;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, vwarps = nt / 32;
  for (int vw = warp; vw < vwarps; vw += warps) {
    const float v = warp_sum(part[vw * 32 + lane]);
    if (lane == 0) wsum[vw] = v;
  }
  __syncthreads();
  const float total = warp_sum(lane < vwarps ? wsum[lane] : 0.0f);
  const float rstd = rsqrtf(total / float(hidden) + in.eps);
#pragma unroll
  for (int j = 0; j < kWeightRegs; ++j) {
    const int c = threadIdx.x + j * threads;
    if (c < q4) store_normed<T>(xs, c, s4[c], wreg[j], rstd);
  }
  const float4* w4 = reinterpret_cast<const float4*>(in.weight);
  for (int c = threadIdx.x + kWeightRegs * threads; c < q4; c += threads) store_normed<T>(xs, c, s4[c], w4[c], rstd);
  __syncthreads();
}

/// One round of kRows * kUnroll streamed weight loads from chunk c0 on (zeros past the row end).
template <int kRows, int kUnroll>
__device__ __forceinline__ void load_round(uint4 (&wv)[kUnroll][kRows], const uint4* const (&wp)[kRows], int c0,
                                           int chunks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = c0 + u * kThreads;
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[u][r] = c < chunks ? load_stream(wp[r] + c) : make_uint4(0, 0, 0, 0);
  }
}

/// The most 128-thread sub-blocks a normed kernel's block holds (registers: 80 a thread).
constexpr int kMaxSubBlocks = 6;

/// Waits for the 128 threads of sub-block `sub` (named barrier sub + 1; 0 is __syncthreads).
__device__ __forceinline__ void sub_block_sync(int sub) {
  asm volatile("bar.sync %0, %1;" ::"r"(sub + 1), "r"(kThreads) : "memory");
}

/// The normed GEMV. A block is blockDim.x / 128 sub-blocks sharing one normalised x; sub-block s
/// of block b takes the groups (b * subs + s) + i * gridDim.x * subs and computes each exactly as
/// a 128-thread gemv block would. The weights of the first round go out before the wait for
/// the previous kernel.
template <class T, int kRows, class Epi>
__device__ __forceinline__ void gemv_norm_body(const norm_input& in, const T* w, const Epi& epi) {
  constexpr int kUnroll = kLoadsInFlight / kRows;
  extern __shared__ uint4 smem[];
  float* res_s = reinterpret_cast<float*>(smem);
  T* xs = reinterpret_cast<T*>(res_s + in.hidden);
  float* part = reinterpret_cast<float*>(xs + in.hidden);
  const int subs = blockDim.x / kThreads, sub = threadIdx.x / kThreads, tid = threadIdx.x % kThreads;
  partials<1, kRows>& red = reinterpret_cast<partials<1, kRows>*>(part + 1024 + 32)[sub];
  const int k = in.hidden, chunks = k / 8, groups = epi.groups(), stride = gridDim.x * subs;
  const uint4* const xv = reinterpret_cast<const uint4*>(xs);
  int g = blockIdx.x * subs + sub;
  const bool active = g < groups;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    wp[r] = reinterpret_cast<const uint4*>(w + size_t(epi.row(active ? g : groups - 1, r)) * k);
  uint4 wv[kUnroll][kRows];
  launch_dependents();
  load_round<kRows, kUnroll>(wv, wp, active ? tid : chunks, chunks);
  float4 wreg[kWeightRegs];
  load_norm_weight(in, wreg);
  wait_for_previous_grid();
  normalise_into<T>(in, wreg, res_s, xs, part, part + 1024);
  if (!active) return;  // no block-wide barrier after this point
  for (;;) {
    float acc[kRows][1];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r][0] = 0.0f;
    for (int c0 = tid;;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * kThreads;
        if (c >= chunks) break;
        fma_chunk<T, kRows>(wv[u], xv[c], acc);
      }
      c0 += kThreads * kUnroll;
      if (c0 >= chunks) break;
      load_round<kRows, kUnroll>(wv, wp, c0, chunks);
    }
    reduce_warps<1, kRows>(acc, red);
    sub_block_sync(sub);
    epi.template finish<T>(g, red, tid);
    g += stride;
    if (g >= groups) break;
#pragma unroll
    for (int r = 0; r < kRows; ++r) wp[r] = reinterpret_cast<const uint4*>(w + size_t(epi.row(g, r)) * k);
    load_round<kRows, kUnroll>(wv, wp, tid, chunks);
    sub_block_sync(sub);  // the sub-block has read `red`
  }
}

template <class T, int kRows, class Epi>
__global__ void __launch_bounds__(kMaxSubBlocks * kThreads) gemv_norm_kernel(norm_input in, const T* w, Epi epi) {
  gemv_norm_body<T, kRows>(in, w, epi);
}

/// Registers of gemv_add_kernel are bounded so a one-token o or down projection (1024 blocks of 4
/// rows) fits one wave: 8 blocks per SM (64 registers a thread), as the plain GEMV's 56 do.
constexpr int kAddBlocksPerSm = 8;

/// residual[row] += (W x)[row] + bias[row], kRows rows per block; the residual value is loaded
/// right after the wait for the previous kernel, not after the main loop.
template <class T, int kRows>
__global__ void __launch_bounds__(kThreads, kAddBlocksPerSm) gemv_add_kernel(const T* x, int k, const T* w, int n,
                                                                              float* residual, const float* bias) {
  __shared__ partials<1, kRows> red;
  const int row0 = blockIdx.x * kRows;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wp[r] = reinterpret_cast<const uint4*>(w + size_t(min(row0 + r, n - 1)) * k);
  const int r = threadIdx.x, row = row0 + r;
  const bool mine = r < kRows && row < n;
  float before = 0.0f;
  accumulate<T, 1, kRows>(x, 1, k, wp, red, [&] {
    if (mine) before = residual[row];
  });
  if (!mine) return;
  residual[row] = before + (red.total(r, 0) + (bias ? bias[row] : 0.0f));
}

bool g_fused_norm = env_int("ACTORSERVE_FUSED_NORM", 0) != 0;
bool g_residual_gemv = env_int("ACTORSERVE_RESIDUAL_GEMV", 0) != 0;
int g_blocks_per_sm = env_int("ACTORSERVE_NORM_GEMV_BLOCKS", 0);
int g_sub_blocks = env_int("ACTORSERVE_NORM_GEMV_SUBBLOCKS", 3);
int g_gate_up_rows = env_int("ACTORSERVE_NORM_GATE_UP_ROWS", 4);

/// Blocks of the normed kernel `kernel` (of `threads` threads) over `blocks` blocks' worth of
/// groups: all of them, or at most one wave (or g_blocks_per_sm per SM).
template <class K>
int norm_grid(K kernel, int blocks, int threads, size_t smem) {
  if (g_blocks_per_sm < 0) return blocks;
  thread_local int cached_per_sm = 0, cached_threads = 0;
  thread_local const void* cached_kernel = nullptr;
  thread_local size_t cached_smem = 0;
  const int sms = current_sm_count();
  int per_sm = g_blocks_per_sm;
  if (per_sm == 0) {
    if (cached_kernel != reinterpret_cast<const void*>(kernel) || cached_smem != smem || cached_threads != threads) {
      cached_per_sm = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached_per_sm, kernel, threads, smem);
      cached_kernel = reinterpret_cast<const void*>(kernel);
      cached_smem = smem;
      cached_threads = threads;
    }
    per_sm = cached_per_sm;
  }
  const int cap = (per_sm > 0 ? per_sm : 1) * sms;
  return blocks < cap ? blocks : cap;
}

template <class T, int kRows, class Epi>
int launch_norm(const norm_input& in, const void* w, const Epi& epi, int groups, cudaStream_t s) {
  if (groups <= 0) return 0;
  auto* kernel = gemv_norm_kernel<T, kRows, Epi>;
  const int subs = g_sub_blocks < 1 ? 1 : g_sub_blocks > kMaxSubBlocks ? kMaxSubBlocks : g_sub_blocks;
  const size_t smem = norm_smem_bytes(in.hidden, subs);
  if (smem > 48 * 1024) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
      return e;
  }
  const int grid = norm_grid(kernel, (groups + subs - 1) / subs, subs * kThreads, smem);
  return launch_pdl_smem(kernel, dim3(grid), dim3(subs * kThreads), smem, s, in, static_cast<const T*>(w), epi);
}

}  // namespace

void set_fused_norm_decode(bool on) { g_fused_norm = on; }
bool fused_norm_decode() { return g_fused_norm; }
void set_residual_gemv_decode(bool on) { g_residual_gemv = on; }
bool residual_gemv_decode() { return g_residual_gemv; }
void set_norm_gemv_blocks_per_sm(int blocks) { g_blocks_per_sm = blocks; }
void set_norm_gemv_sub_blocks(int subs) { g_sub_blocks = subs; }

bool norm_gemv_supported(const norm_input& in, const void* w) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return in.hidden > 0 && in.hidden % 8 == 0 && in.hidden <= norm_gemv_max_hidden && aligned(in.residual) &&
         aligned(in.weight) && aligned(w);
}

int gemv_add_residual(act_dtype dt, const void* x, int k, const void* w, int n, float* residual, const float* bias,
                      cudaStream_t s) {
  if (n <= 0) return 0;
  AS_DISPATCH_ACT(dt, launch_pdl(gemv_add_kernel<T, 4>, dim3((n + 3) / 4), dim3(kThreads), s,
                                 static_cast<const T*>(x), k, static_cast<const T*>(w), n, residual, bias));
  return cudaGetLastError();
}

int gemv_norm_qkv_rope(act_dtype dt, const norm_input& in, const void* w, const rope_kv_args& a, cudaStream_t s) {
  const qkv_rope_epilogue<> epi{a};
  const int groups = (a.num_heads + 2 * a.num_kv_heads) * (a.head_dim / 2);
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_norm<T, 2>(in, w, epi, groups, s));
  return rc;
}

int gemv_norm_gate_up_silu(act_dtype dt, const norm_input& in, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s) {
  int rc = 0;
  if (rows_per_block == 0) rows_per_block = g_gate_up_rows;
  if (rows_per_block == 2)
    AS_DISPATCH_ACT(dt, rc = launch_norm<T, 2>(in, w, gate_up_epilogue<1>{act, inter}, inter, s));
  else
    AS_DISPATCH_ACT(dt, rc = launch_norm<T, 4>(in, w, gate_up_epilogue<2>{act, inter}, (inter + 1) / 2, s));
  return rc;
}

int gemv_norm(act_dtype dt, const norm_input& in, const void* w, int n, float* y, cudaStream_t s) {
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_norm<T, 4>(in, w, store_epilogue<4>{y, n}, (n + 3) / 4, s));
  return rc;
}

}  // namespace actorserve::gpu::cuda
