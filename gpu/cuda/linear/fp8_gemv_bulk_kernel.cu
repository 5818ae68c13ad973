// The one-token FP8 GEMVs on the bulk-copy ring (fp8_gemv_bulk.hpp, gemv_bulk_ring.cuh): groups of
// 4 or 8 E4M3 weight rows (bulk_gemv_tuning::fp8_rows), 16 weights per 16-byte chunk. Consumer
// thread t takes chunks t, t + 128, ... of each row in order, as thread t of fp8_linear_kernel.cu's
// block does at m = 1, and converts and sums each as it does (fp8_gemv.cuh, dot_load): the same
// outputs whatever the group size, since a row's sum never meets another row's. A stage holds
// 16 KiB, so 8 rows a group take one block reduction per twice the weight bytes of 4 rows and
// unpack each activation chunk for twice the rows; the rows of a chunk are converted and summed
// one at a time, so the registers do not grow with the group. The warp sums go through
// reduce_warps_scattered (gemv_bulk_ring.cuh): fp8_gemv's butterfly sums, fewer shuffles. The
// fused GEMVs (fp8_gemv_fused.hpp) run the same kernel in groups of the same fp8_rows rows (8: 4
// rotary pairs, or 4 gate rows and their 4 up rows; 4: 2 and 2) with a fused epilogue that takes
// the rows' scales first (fp8_gemv_epilogue.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv.cuh"
#include "gpu/cuda/linear/fp8_gemv_epilogue.cuh"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/gemv_bulk_ring.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;
using namespace dev::gemv::bulk;
using dev::fp8::e4m3_weights;
using dev::fp8::row_scaled;

// kBlockScaled is read by the kernel only: nvcc's host pass, which drops kernel bodies, would
// call it unreferenced (warning 177).
#pragma nv_diag_suppress 177
/// Group g holds weight rows g * kRows + r; its outputs are stored as fp8_gemv stores them.
template <fp8_scale_mode Mode, int kRows>
struct fp8_store_epilogue {
  static constexpr bool kBlockScaled = Mode == fp8_scale_mode::block128;  // scales inside the sums
  float* y;
  const float* scale;
  int n, k;
  float beta;
  __host__ __device__ __forceinline__ int groups() const { return (n + kRows - 1) / kRows; }
  __device__ __forceinline__ int row(int g, int r) const { return min(g * kRows + r, n - 1); }
  /// The block scale of load c of row r of group g (block128).
  __device__ __forceinline__ float load_scale(int g, int r, int c) const {
    return __ldg(dev::fp8::block128_scale_row(scale, row(g, r), k) + (c >> 3));
  }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    const int r = tid, out = g * kRows + r;
    if (r < kRows && out < n) dev::fp8::store_row<Mode>(y + out, red.total(r, 0), scale, out, beta);
  }
};
#pragma nv_diag_default 177

/// The bulk-copy engine and mbarrier transaction counts need sm_90: for older targets the kernel
/// traps, and fp8_gemv_bulk_supported refuses where the GPU or the loaded code lacks them. Epi:
/// fp8_store_epilogue, or a fused epilogue with row scales (fp8_gemv_epilogue.cuh, row_scaled);
/// Epi::kBlockScaled says whether each load's partial sum takes its block's scale (load_scale).
template <class T, int kRows, class Epi>
__global__ void __launch_bounds__(kBlockThreads, 1) fp8_gemv_bulk_kernel(const T* x, int k, const uint8_t* q,
                                                                          Epi epi, int stages, bool evict_first) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  constexpr bool kScaled = Epi::kBlockScaled;
  constexpr int kPer = e4m3_weights::kPerLoad, kUnroll = kLoadsInFlight / kRows, kRowChunks = kSlice<kRows>;
  extern __shared__ uint4 smem[];
  const ring_smem<kRows> sm(smem, stages);
  launch_dependents();
  sm.init(stages);
  const int chunks = k / kPer;
  if (threadIdx.x >= kThreads) {  // the producer warp: weights only, no wait for the previous grid
    if (threadIdx.x == kThreads) produce(sm, q, size_t(k), chunks, epi, stages, evict_first);
    return;
  }
  const int tid = threadIdx.x;
  const uint4* const xv = reinterpret_cast<const uint4*>(x);
  consume<T>(sm, chunks, epi, stages, [&](int g, float (&acc)[kRows][1], const uint4* st, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int cl = u * kThreads + tid, c = c0 + cl;
      if (c >= chunks) break;
      float xf[kPer];
      unpack8<T>(__ldg(xv + 2 * c), xf);
      unpack8<T>(__ldg(xv + 2 * c + 1), xf + 8);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // one row's 16 weights live at a time
        float wf[kPer];
        e4m3_weights::unpack(st[r * kRowChunks + cl], wf);
        float sc = 1.0f;
        if constexpr (kScaled) sc = epi.load_scale(g, r, c);
        acc[r][0] = dot_load<kPer, kScaled>(wf, xf, sc, acc[r][0]);
      }
    }
  }, scattered_warp_sums{});
#endif
}

template <class T, int kRows, class Epi>
int launch_epilogue(const void* x, int k, const uint8_t* q, const Epi& epi, cudaStream_t s,
                    const bulk_gemv_tuning& bulk) {
  static std::atomic<size_t> allowed{48 * 1024};  // per kernel: the dynamic shared memory it may take
  return launch_ring<ring_smem<kRows>>(fp8_gemv_bulk_kernel<T, kRows, Epi>, allowed, epi.groups(), s, bulk,
                            static_cast<const T*>(x), k, q, epi);
}

template <class T, fp8_scale_mode Mode, int kRows>
int launch_fp8_bulk(const T* x, int k, const uint8_t* q, const float* scale, int n, float* y, float beta,
                    cudaStream_t s, const bulk_gemv_tuning& bulk) {
  return launch_epilogue<T, kRows>(x, k, q, fp8_store_epilogue<Mode, kRows>{y, scale, n, k, beta}, s, bulk);
}

template <class T, int kRows>
int launch_fp8_bulk_mode(const T* x, int k, const uint8_t* q, const float* scale, int n, float* y, float beta,
                         cudaStream_t s, fp8_scale_mode mode, const bulk_gemv_tuning& bulk) {
  if (mode == fp8_scale_mode::block128)
    return launch_fp8_bulk<T, fp8_scale_mode::block128, kRows>(x, k, q, scale, n, y, beta, s, bulk);
  return launch_fp8_bulk<T, fp8_scale_mode::per_row, kRows>(x, k, q, scale, n, y, beta, s, bulk);
}

}  // namespace

bool fp8_gemv_bulk_supported(const void* x, int k, const void* q) {
  return fp8_gemv_supported(x, 1, k, q) && runs_tma(loaded_gpu_target());
}

int fp8_gemv_bulk(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int n, float* y,
                  float beta, cudaStream_t s, fp8_scale_mode mode, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_bulk_supported(x, k, q) || (bulk.fp8_rows != 4 && bulk.fp8_rows != 8))
    return int(cudaErrorInvalidValue);
  if (n <= 0) return 0;
  int rc = 0;
  AS_DISPATCH_ACT(dt, {
    const T* xt = static_cast<const T*>(x);
    rc = bulk.fp8_rows == 8 ? launch_fp8_bulk_mode<T, 8>(xt, k, q, scale, n, y, beta, s, mode, bulk)
                            : launch_fp8_bulk_mode<T, 4>(xt, k, q, scale, n, y, beta, s, mode, bulk);
  });
  return rc;
}

int fp8_gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                           const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_bulk_supported(x, k, q) || (bulk.fp8_rows != 4 && bulk.fp8_rows != 8))
    return int(cudaErrorInvalidValue);
  int rc = 0;
  if (bulk.fp8_rows == 8)
    AS_DISPATCH_ACT(dt, rc = launch_epilogue<T, 8>(x, k, q, row_scaled<qkv_rope_epilogue<4>>{{a}, scale}, s, bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_epilogue<T, 4>(x, k, q, row_scaled<qkv_rope_epilogue<2>>{{a}, scale}, s, bulk));
  return rc;
}

int fp8_gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                               void* act, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_bulk_supported(x, k, q) || (bulk.fp8_rows != 4 && bulk.fp8_rows != 8))
    return int(cudaErrorInvalidValue);
  int rc = 0;
  if (bulk.fp8_rows == 8)
    AS_DISPATCH_ACT(dt, rc = launch_epilogue<T, 8>(x, k, q, row_scaled<gate_up_epilogue<4>>{{act, inter}, scale}, s,
                                                   bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_epilogue<T, 4>(x, k, q, row_scaled<gate_up_epilogue<2>>{{act, inter}, scale}, s,
                                                   bulk));
  return rc;
}

}  // namespace actorserve::gpu::cuda
