// Skinny GEMM (decode GEMV): one thread block per kRows weight rows, its threads striding along k
// in 16-byte chunks. Weight loads bypass L1 (each byte is read once); the activation rows, read
// by every block, stay in L1/L2. Per-thread partial sums are reduced in a fixed order, so results
// do not depend on scheduling.
#include <cstdint>

#include "gpu/cuda/gemv_kernel.hpp"
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kLoadsInFlight = 8;  // 16-byte weight loads per thread per round

/// A streamed 16-byte load: not kept in L1, prefetching 256 bytes into L2.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// Programmatic dependent launch (sm_90, see launch_pdl): let the next kernel start launching;
/// wait until the previous one has finished and its writes are visible.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

/// kRows weight rows per block, M activation rows (m <= M).
template <class T, int M, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const T* x, int m, int k, const T* w, int n, float* y,
                                                         float beta) {
  constexpr int kUnroll = kLoadsInFlight / kRows;
  __shared__ float red[kWarps][kRows * M];
  const int row0 = blockIdx.x * kRows;
  const int chunks = k / 8;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    wp[r] = reinterpret_cast<const uint4*>(w + size_t(min(row0 + r, n - 1)) * k);
  const uint4* xp = reinterpret_cast<const uint4*>(x);
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;

  // The weights never depend on earlier kernels: the first loads go out before waiting for them.
  launch_dependents();
  bool waited = false;
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kThreads * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[u][r] = c < chunks ? load_stream(wp[r] + c) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) {
      wait_for_previous_grid();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack8<T>(wv[u][r], wf[r]);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= m) break;
        float xf[8];
        unpack8<T>(__ldg(xp + size_t(i) * chunks + c), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(wf[r][e], xf[e], acc[r][i]);
      }
    }
  }
  wait_for_previous_grid();  // threads without a chunk; y may still be read by the previous kernel
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) red[warp][r * M + i] = v;
    }
  __syncthreads();
  for (int t = threadIdx.x; t < kRows * M; t += kThreads) {
    const int r = t / M, i = t % M, row = row0 + r;
    if (i >= m || row >= n) continue;
    float v = 0.0f;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) v += red[q][t];
    float* dst = y + size_t(i) * n + row;
    *dst = beta == 0.0f ? v : v + beta * *dst;
  }
}

template <class T, int M, int R>
void launch_rows(const T* x, int m, int k, const T* w, int n, float* y, float beta, cudaStream_t s) {
  dev::launch_pdl(gemv_kernel<T, M, R>, dim3((n + R - 1) / R), dim3(kThreads), s, x, m, k, w, n, y, beta);
}

template <class T>
void launch(const T* x, int m, int k, const T* w, int n, float* y, float beta, int rows, cudaStream_t s) {
  if (m <= 2) {  // few accumulators: fewer rows per block buy more blocks (a shorter tail)
    if (m == 1) {
      if (rows == 1) return launch_rows<T, 1, 1>(x, m, k, w, n, y, beta, s);
      if (rows == 2) return launch_rows<T, 1, 2>(x, m, k, w, n, y, beta, s);
      return launch_rows<T, 1, 4>(x, m, k, w, n, y, beta, s);
    }
    if (rows == 1) return launch_rows<T, 2, 1>(x, m, k, w, n, y, beta, s);
    if (rows == 2) return launch_rows<T, 2, 2>(x, m, k, w, n, y, beta, s);
    return launch_rows<T, 2, 4>(x, m, k, w, n, y, beta, s);
  }
  if (m <= 4) return launch_rows<T, 4, 4>(x, m, k, w, n, y, beta, s);
  launch_rows<T, 8, 4>(x, m, k, w, n, y, beta, s);
}

}  // namespace

bool gemv_supported(const void* x, int m, int k, const void* w) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return m >= 1 && m <= gemv_max_m && k > 0 && k % 8 == 0 && aligned(x) && aligned(w);
}

int gemv(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta, cudaStream_t s,
         int rows_per_block) {
  if (n <= 0) return 0;
  AS_DISPATCH_ACT(dt, launch<T>(static_cast<const T*>(x), m, k, static_cast<const T*>(w), n, y, beta,
                                rows_per_block, s));
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
