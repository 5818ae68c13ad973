// Element-wise and row-wise kernels: dtype conversion, embedding gather, residual add + RMSNorm,
// SiLU-and-mul, rotary embedding fused with the paged KV write, KV block copies.
#include <algorithm>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/sm_count.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/programmatic_launch.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/ops/rmsnorm_row.cuh"
#include "gpu/cuda/ops/rope_kv.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

__device__ __forceinline__ float load_src(const void* src, src_dtype sd, size_t i) {
  switch (sd) {
    case src_dtype::f32: return static_cast<const float*>(src)[i];
    case src_dtype::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    default: return __half2float(static_cast<const __half*>(src)[i]);
  }
}

template <class T>
__global__ void convert_kernel(const void* src, src_dtype sd, T* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<T>(load_src(src, sd, i));
}

__global__ void convert_f32_kernel(const void* src, src_dtype sd, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = load_src(src, sd, i);
}

template <class T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, int hidden, float* out) {
  pdl_begin();
  const int t = blockIdx.x;
  const T* row = table + size_t(ids[t]) * hidden;
  float* o = out + size_t(t) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = to_f32(row[i]);
}

/// Block i copies row rows[i] of src into row i of dst, 16 bytes at a time where aligned.
__global__ void gather_rows_kernel(const float* src, int src_stride, const int32_t* rows, int width, float* dst) {
  pdl_begin();
  const int i = blockIdx.x;
  const float* from = src + size_t(rows[i]) * src_stride;
  float* to = dst + size_t(i) * width;
  if (width % 4 == 0 && src_stride % 4 == 0) {
    const float4* f4 = reinterpret_cast<const float4*>(from);
    float4* t4 = reinterpret_cast<float4*>(to);
    for (int c = threadIdx.x; c < width / 4; c += blockDim.x) t4[c] = f4[c];
  } else {
    for (int c = threadIdx.x; c < width; c += blockDim.x) to[c] = from[c];
  }
}

/// The rows an add_rmsnorm block works on (block i: residual row rows[i], or i without `rows`),
/// read after waiting for the previous kernel.
struct norm_rows {
  float* res;
  const float* del;  ///< null without a delta
  __device__ __forceinline__ norm_rows(float* residual, const float* delta, const int32_t* rows, int hidden) {
    pdl_begin();
    const int i = blockIdx.x;
    const int r = rows ? rows[i] : i;
    res = residual + size_t(r) * hidden;
    del = delta ? delta + size_t(r) * hidden : nullptr;
  }
};

template <class T>
__global__ void add_rmsnorm_kernel(float* residual, const float* delta, const float* bias, const float* weight,
                                   float eps, const int32_t* rows, int hidden, T* out) {
  __shared__ float scratch[32];
  const norm_rows row(residual, delta, rows, hidden);
  const int i = blockIdx.x;
  float* res = row.res;
  const float* del = row.del;
  float ss = 0.0f;
  for (int k = threadIdx.x; k < hidden; k += blockDim.x) {
    float v = res[k];
    if (del) {
      v += del[k] + (bias ? bias[k] : 0.0f);
      res[k] = v;
    }
    ss += v * v;
  }
  const float total = block_sum(ss, scratch);
  const float rstd = rsqrtf(total / float(hidden) + eps);
  T* o = out + size_t(i) * hidden;
  for (int k = threadIdx.x; k < hidden; k += blockDim.x) o[k] = from_f32<T>(weight[k] * (res[k] * rstd));
}

/// Rows up to which add_rmsnorm keeps values in registers: faster up to 128 rows; past that, too
/// few of its register-heavy 1024-thread blocks are resident per SM (docs/attention.md, Decisions).
constexpr int kNormRegsMaxRows = 128;

/// add_rmsnorm_kernel for hidden <= kNormPerThread * blockDim.x (rmsnorm_row.cuh): every load is
/// issued before the first store (one round trip instead of one per element), the values stay in
/// registers, and the sum runs in the same order (the same results).
template <class T>
__global__ void add_rmsnorm_regs_kernel(float* residual, const float* delta, const float* bias, const float* weight,
                                        float eps, const int32_t* rows, int hidden, T* out) {
  __shared__ float scratch[32];
  const norm_rows row(residual, delta, rows, hidden);
  T* o = out + size_t(blockIdx.x) * hidden;
  add_rmsnorm_row<T>(row.res, row.del, bias, weight, eps, hidden, scratch, [o](int k, T v) { o[k] = v; });
}

/// Sums of R rows over the block, each in block_sum's order (the same results); `scratch` holds
/// R x 32 floats. Every thread gets the R sums.
template <int R>
__device__ __forceinline__ void block_sum_rows(float (&v)[R], float (*scratch)[32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = warp_sum(v[r]);
  __syncthreads();
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; ++r) scratch[r][warp] = v[r];
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = warp_sum(lane < warps ? scratch[r][lane] : 0.0f);
}

/// add_rmsnorm_regs_kernel for many rows: persistent 1024-thread blocks (one per SM, at most one
/// per row) take kRows rows at a time, gridDim.x apart (every SM busy from 2 x SMs rows on), so
/// kRows rows' loads are in flight together and one pair of barriers serves them all; the
/// weights are read once per block.
/// Each row's arithmetic is the regs kernel's, in its order (the same results, bit for bit).
/// kPer values per thread (hidden <= kPer * blockDim.x).
template <class T, int kPer, int kRows>
__global__ void __launch_bounds__(1024, 1)
    add_rmsnorm_rows_kernel(float* residual, const float* delta, const float* bias, const float* weight, float eps,
                            const int32_t* rows, int n, int hidden, T* out) {
  __shared__ float scratch[kRows][32];
  pdl_begin();
  const int tid = threadIdx.x, nt = blockDim.x;
  float w[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) w[j] = tid + j * nt < hidden ? weight[tid + j * nt] : 0.0f;
  for (int i0 = blockIdx.x; i0 < n; i0 += gridDim.x * kRows) {
    float v[kRows][kPer], ss[kRows];
    size_t base[kRows];  // residual offsets of the group's rows (rows past n load nothing, store nothing)
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int i = i0 + q * gridDim.x;
      const size_t r = base[q] = i < n ? size_t(rows ? rows[i] : i) * hidden : 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int k = tid + j * nt;
        v[q][j] = 0.0f;
        if (i < n && k < hidden) {
          v[q][j] = residual[r + k];
          if (delta) v[q][j] += delta[r + k] + (bias ? bias[k] : 0.0f);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      ss[q] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) ss[q] += v[q][j] * v[q][j];
    }
    block_sum_rows<kRows>(ss, scratch);
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const int i = i0 + q * gridDim.x;
      if (i >= n) break;
      const size_t r = base[q];
      const float rstd = rsqrtf(ss[q] / float(hidden) + eps);
      T* o = out + size_t(i) * hidden;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int k = tid + j * nt;
        if (k >= hidden) break;
        if (delta) residual[r + k] = v[q][j];
        o[k] = from_f32<T>(w[j] * (v[q][j] * rstd));
      }
    }
  }
}

/// Threads per row of add_rmsnorm_row128_kernel.
constexpr int kNormRowThreads = 128;

/// Eight consecutive floats from 16-byte aligned `p`.
__device__ __forceinline__ void load8f(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8f(float* p, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/// add_rmsnorm for many rows, one row per 128-thread block (hidden % 8 == 0, hidden <= 1024 x
/// kChunks). A thread owns kChunks runs of 8 consecutive elements (128 apart in runs): its loads
/// are 16-byte vectors all issued before the first use, its output a 16-byte store per run, and
/// up to 16 rows are in flight per SM (the 1024-thread kernels keep 2-4). The sum runs per thread,
/// then over the warp, then over the 4 warps: a different order from the one-row kernels (the
/// same row gives the same bits whatever the row count, as long as the count exceeds
/// kNormRegsMaxRows).
template <class T, int kChunks>
__global__ void __launch_bounds__(kNormRowThreads)
    add_rmsnorm_row128_kernel(float* residual, const float* delta, const float* bias, const float* weight, float eps,
                              const int32_t* rows, int hidden, T* out) {
  __shared__ float scratch[kNormRowThreads / 32];
  const norm_rows row(residual, delta, rows, hidden);
  const int i = blockIdx.x, tid = threadIdx.x;
  float v[kChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int k = (tid + c * kNormRowThreads) * 8;
    if (k < hidden) load8f(row.res + k, v[c]);
  }
  if (row.del) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int k = (tid + c * kNormRowThreads) * 8;
      if (k >= hidden) break;
      float d[8], b[8] = {};
      load8f(row.del + k, d);
      if (bias) load8f(bias + k, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] += d[e] + b[e];
      store8f(row.res + k, v[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int k = (tid + c * kNormRowThreads) * 8;
    if (k >= hidden) break;
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(hidden) + eps);
  T* o = out + size_t(i) * hidden;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int k = (tid + c * kNormRowThreads) * 8;
    if (k >= hidden) break;
    float w[8];
    load8f(weight + k, w);
    uint4 raw;
    T* packed = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) packed[e] = from_f32<T>(w[e] * (v[c][e] * rstd));
    *reinterpret_cast<uint4*>(o + k) = raw;
  }
}

/// SiLU-and-mul over rows of 4-element groups (inter % 4 == 0): grid (groups / 256, tokens).
template <class T>
__global__ void silu_mul4_kernel(const float* gu, int n, int inter, T* out) {
  pdl_begin();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g * 4 >= inter) return;
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    const float4 gv = *reinterpret_cast<const float4*>(gu + size_t(t) * 2 * inter + g * 4);
    const float4 uv = *reinterpret_cast<const float4*>(gu + size_t(t) * 2 * inter + inter + g * 4);
    const float ga[4] = {gv.x, gv.y, gv.z, gv.w}, ua[4] = {uv.x, uv.y, uv.z, uv.w};
    T* o = out + size_t(t) * inter + g * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = silu_mul<T>(ga[e], ua[e]);
  }
}

/// SiLU-and-mul over a 16-bit gate_up, 8 elements per thread from 16-byte loads (inter % 8 == 0):
/// grid (groups / 256, tokens).
template <class T>
__global__ void silu_mul8_kernel(const T* gu, int n, int inter, T* out) {
  pdl_begin();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g * 8 >= inter) return;
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    float ga[8], ua[8];
    load8(gu + size_t(t) * 2 * inter + g * 8, ga);
    load8(gu + size_t(t) * 2 * inter + inter + g * 8, ua);
    uint4 raw;
    T* o = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = silu_mul<T>(ga[e], ua[e]);
    *reinterpret_cast<uint4*>(out + size_t(t) * inter + g * 8) = raw;
  }
}

/// Any inter; gate_up of fp32 or of T.
template <class T, class In>
__global__ void silu_mul_kernel(const In* gu, int n, int inter, T* out) {
  pdl_begin();
  const size_t total = size_t(n) * inter;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < total; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t t = idx / inter, i = idx % inter;
    const float g = to_f32(gu[t * 2 * inter + i]), u = to_f32(gu[t * 2 * inter + inter + i]);
    out[idx] = silu_mul<T>(g, u);
  }
}

/// Two floats as 16-bit values (round to nearest even), `lo` in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const T l = from_f32<T>(lo), h = from_f32<T>(hi);
  return uint32_t(*reinterpret_cast<const uint16_t*>(&l)) | (uint32_t(*reinterpret_cast<const uint16_t*>(&h)) << 16);
}

/// Grid (tokens, kRopeSplit) of kRopeThreads: one block of 128 threads per token, each thread
/// rotating several 4-pair groups, computes the token's angles once (the fastest of the grids
/// from 1 to 4 blocks of 128 to 512 threads per token).
constexpr int kRopeSplit = 1, kRopeThreads = 128;

/// Rotary pairs of a head: head dims up to 256 (cuda_model.cpp rejects larger ones).
constexpr int kRopeMaxHalf = 128;

/// Four adjacent values of a row as fp32: one 16-byte load of fp32, one 8-byte load of 16-bit.
__device__ __forceinline__ void load4(const float* p, float (&x)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&x)[4]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = to_f32(h[e]);
}

/// Rotary embedding of one token's q and k heads, written back (q) or into the paged cache (k),
/// plus the copy of its v into the cache; grid (tokens, kRopeSplit), head_dim % 8 == 0. The
/// token's angles are computed once (every head rotates by the same ones); each thread rotates 4
/// adjacent pairs (16-byte loads and stores of q, 4 cache elements at a time) and copies v 4
/// values at a time. In: the input row's type (fp32 qkv, or T when rope_kv_args::qkv16 is set).
template <class T, class In, class C>
__global__ void rope_kv_kernel(rope_kv_args a) {
  __shared__ float cos_s[kRopeMaxHalf], sin_s[kRopeMaxHalf];
  pdl_begin();
  const int t = blockIdx.x;
  const int D = a.head_dim, half = D / 2, H = a.num_heads, KVH = a.num_kv_heads, quads = half / 4;
  const size_t width = size_t(H + 2 * KVH) * D;
  float* row = a.qkv + size_t(t) * width;
  const In* in = (a.qkv16 ? static_cast<const In*>(a.qkv16) : reinterpret_cast<const In*>(a.qkv)) + size_t(t) * width;
  const bool q32 = !a.q32 || a.q32[t] != 0;
  const int pos = a.positions[t];
  const int slot = a.slots[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 cs = rope_cos_sin(pos, a.inv_freq[i], a.attention_factor);
    cos_s[i] = cs.x;
    sin_s[i] = cs.y;
  }
  __syncthreads();
  const int first = blockIdx.y * blockDim.x + threadIdx.x, stride = gridDim.y * blockDim.x;
  C* kc = static_cast<C*>(a.k_cache);
  C* vc = static_cast<C*>(a.v_cache);
  for (int idx = first; idx < (H + KVH) * quads; idx += stride) {  // pairs (i, i + half)
    const int h = idx / quads, i = (idx % quads) * 4;
    const int c0 = h * D + i, c1 = c0 + half;
    if (h < H && !q32 && !a.q16) continue;
    float x1[4], x2[4], y1[4], y2[4];
    load4(in + c0, x1);
    load4(in + c1, x2);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (a.bias) {
        x1[e] += a.bias[c0 + e];
        x2[e] += a.bias[c1 + e];
      }
      const float2 y = rope_rotate(x1[e], x2[e], make_float2(cos_s[i + e], sin_s[i + e]));
      y1[e] = y.x;
      y2[e] = y.y;
    }
    if (h < H) {
      if (q32) {
        *reinterpret_cast<float4*>(row + c0) = make_float4(y1[0], y1[1], y1[2], y1[3]);
        *reinterpret_cast<float4*>(row + c1) = make_float4(y2[0], y2[1], y2[2], y2[3]);
      }
      if (a.q16) {  // the same rounding as the prefill kernel's own fp32 -> 16-bit staging
        T* q16 = static_cast<T*>(a.q16) + size_t(t) * H * D;
        const float sc = a.q16_scale;
        *reinterpret_cast<uint2*>(q16 + c0) =
            make_uint2(pack2<T>(y1[0] * sc, y1[1] * sc), pack2<T>(y1[2] * sc, y1[3] * sc));
        *reinterpret_cast<uint2*>(q16 + c1) =
            make_uint2(pack2<T>(y2[0] * sc, y2[1] * sc), pack2<T>(y2[2] * sc, y2[3] * sc));
      }
    } else if (slot >= 0) {
      C* dst = kc + (size_t(slot) * KVH + (h - H)) * D;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dst[i + e] = kv_elem<T, C>(y1[e], a.k_scale);
        dst[i + half + e] = kv_elem<T, C>(y2[e], a.k_scale);
      }
    }
  }
  if (slot < 0) return;
  for (int idx = first * 4; idx < KVH * D; idx += stride * 4) {
    const int c = (H + KVH) * D + idx;
    float x[4];
    load4(in + c, x);
    C* dst = vc + size_t(slot) * KVH * D + idx;
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[e] = kv_elem<T, C>(a.bias ? x[e] + a.bias[c + e] : x[e], a.v_scale);
  }
}

__global__ void copy_blocks_kernel(char* pool, const int32_t* pairs, size_t cache_stride, size_t block_bytes) {
  const int p = blockIdx.x, c = blockIdx.y;
  char* base = pool + size_t(c) * cache_stride;
  const uint4* src = reinterpret_cast<const uint4*>(base + size_t(pairs[2 * p]) * block_bytes);
  uint4* dst = reinterpret_cast<uint4*>(base + size_t(pairs[2 * p + 1]) * block_bytes);
  for (size_t i = threadIdx.x; i < block_bytes / 16; i += blockDim.x) dst[i] = src[i];
}

int grid_for(size_t n, int threads) {
  size_t g = (n + threads - 1) / threads;
  return int(g < 65536 ? (g == 0 ? 1 : g) : 65536);
}

bool g_programmatic_launch = true;

}  // namespace

void set_programmatic_launch(bool on) { g_programmatic_launch = on; }
bool programmatic_launch() { return g_programmatic_launch && runs_pdl(loaded_gpu_target()); }

int convert_to_act(act_dtype dt, const void* src, src_dtype sd, void* dst, size_t n, cudaStream_t s) {
  AS_DISPATCH_ACT(dt, convert_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(src, sd, static_cast<T*>(dst), n));
  return cudaGetLastError();
}

int convert_to_f32(const void* src, src_dtype sd, float* dst, size_t n, cudaStream_t s) {
  convert_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(src, sd, dst, n);
  return cudaGetLastError();
}

int embedding_gather(act_dtype dt, const void* table, const int32_t* ids, int n, int hidden, float* out,
                     cudaStream_t s) {
  if (n == 0) return 0;
  AS_DISPATCH_ACT(dt, launch_pdl(embedding_kernel<T>, dim3(n), dim3(256), s, static_cast<const T*>(table), ids, hidden,
                                 out));
  return cudaGetLastError();
}

int gather_rows(const float* src, int src_stride, const int32_t* rows, int n, int width, float* dst, cudaStream_t s) {
  if (n == 0) return 0;
  return launch_pdl(gather_rows_kernel, dim3(n), dim3(256), s, src, src_stride, rows, width, dst);
}

int add_rmsnorm(act_dtype dt, float* residual, const float* delta, const float* bias, const float* weight,
                float eps, const int32_t* rows, int n, int hidden, void* out, cudaStream_t s) {
  if (n == 0) return 0;
  const int threads = hidden >= 1024 ? 1024 : ((hidden + 31) / 32) * 32;
  // Many rows: one 128-thread block per row with 16-byte loads where the rows allow them, else
  // persistent 1024-thread blocks of several rows.
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (n > kNormRegsMaxRows && hidden % 8 == 0 && hidden <= 8 * 8 * kNormRowThreads &&
      aligned16(residual) && aligned16(delta) && aligned16(bias) && aligned16(weight) && aligned16(out)) {
    if (hidden <= 4 * 8 * kNormRowThreads)
      AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_row128_kernel<T, 4>, dim3(n), dim3(kNormRowThreads), s, residual,
                                     delta, bias, weight, eps, rows, hidden, static_cast<T*>(out)));
    else
      AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_row128_kernel<T, 8>, dim3(n), dim3(kNormRowThreads), s, residual,
                                     delta, bias, weight, eps, rows, hidden, static_cast<T*>(out)));
  } else if (threads == 1024 && hidden <= kNormPerThread * threads && n > kNormRegsMaxRows) {
    // Persistent blocks, one per SM (launch_bounds 1024 x 1): 4 rows at a time of up to 4
    // values a thread, else 2 rows of up to 8.
    const dim3 grid(std::min(current_sm_count(), n));
    if (hidden <= 4 * threads)
      AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_rows_kernel<T, 4, 4>, grid, dim3(threads), s, residual, delta, bias,
                                     weight, eps, rows, n, hidden, static_cast<T*>(out)));
    else
      AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_rows_kernel<T, kNormPerThread, 2>, grid, dim3(threads), s, residual,
                                     delta, bias, weight, eps, rows, n, hidden, static_cast<T*>(out)));
  } else if (hidden <= kNormPerThread * threads && n <= kNormRegsMaxRows)
    AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_regs_kernel<T>, dim3(n), dim3(threads), s, residual, delta, bias,
                                   weight, eps, rows, hidden, static_cast<T*>(out)));
  else
    AS_DISPATCH_ACT(dt, launch_pdl(add_rmsnorm_kernel<T>, dim3(n), dim3(threads), s, residual, delta, bias, weight,
                                   eps, rows, hidden, static_cast<T*>(out)));
  return cudaGetLastError();
}

int silu_and_mul(act_dtype dt, const float* gate_up, int n, int inter, void* out, cudaStream_t s) {
  if (n == 0) return 0;
  if (inter % 4 == 0) {
    const int groups = inter / 4;
    AS_DISPATCH_ACT(dt, launch_pdl(silu_mul4_kernel<T>, dim3((groups + 255) / 256, n < 65535 ? n : 65535), dim3(256), s,
                                   gate_up, n, inter, static_cast<T*>(out)));
  } else {
    AS_DISPATCH_ACT(dt, launch_pdl(silu_mul_kernel<T, float>, dim3(grid_for(size_t(n) * inter, 256)), dim3(256), s,
                                   gate_up, n, inter, static_cast<T*>(out)));
  }
  return cudaGetLastError();
}

int silu_and_mul_act(act_dtype dt, const void* gate_up, int n, int inter, void* out, cudaStream_t s) {
  if (n == 0) return 0;
  const bool aligned = inter % 8 == 0 && reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (aligned) {
    const int groups = inter / 8;
    AS_DISPATCH_ACT(dt, launch_pdl(silu_mul8_kernel<T>, dim3((groups + 255) / 256, n < 65535 ? n : 65535), dim3(256),
                                   s, static_cast<const T*>(gate_up), n, inter, static_cast<T*>(out)));
  } else {
    AS_DISPATCH_ACT(dt, launch_pdl(silu_mul_kernel<T, T>, dim3(grid_for(size_t(n) * inter, 256)), dim3(256), s,
                                   static_cast<const T*>(gate_up), n, inter, static_cast<T*>(out)));
  }
  return cudaGetLastError();
}

int rope_kv_write(act_dtype dt, const rope_kv_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  // Whole 4-pair groups, 16-byte aligned rows (cuda_model.cpp loads only such head dims).
  if (a.head_dim % 8 != 0 || a.head_dim / 2 > kRopeMaxHalf) return int(cudaErrorInvalidValue);
  const dim3 grid(a.n, kRopeSplit), block(kRopeThreads);
  if (a.kv_fp8 && a.qkv16)
    AS_DISPATCH_ACT(dt, launch_pdl(rope_kv_kernel<T, T, uint8_t>, grid, block, s, a));
  else if (a.kv_fp8)
    AS_DISPATCH_ACT(dt, launch_pdl(rope_kv_kernel<T, float, uint8_t>, grid, block, s, a));
  else if (a.qkv16)
    AS_DISPATCH_ACT(dt, launch_pdl(rope_kv_kernel<T, T, T>, grid, block, s, a));
  else
    AS_DISPATCH_ACT(dt, launch_pdl(rope_kv_kernel<T, float, T>, grid, block, s, a));
  return cudaGetLastError();
}

int copy_kv_blocks(void* pool, const int32_t* pairs, int num_pairs, int num_caches, size_t cache_stride,
                   size_t block_bytes, cudaStream_t s) {
  if (num_pairs == 0) return 0;
  copy_blocks_kernel<<<dim3(num_pairs, num_caches), 256, 0, s>>>(static_cast<char*>(pool), pairs, cache_stride,
                                                                  block_bytes);
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
