// One-token GEMVs streaming their 16-bit weights through the bulk-copy engine into a
// shared-memory ring (gemv_bulk.hpp, gemv_bulk_ring.cuh). Each consumer thread takes the chunks
// a 128-thread gemv_kernel.cu block gives it, in the same order, with the same fmas, warp sums
// and sum over the 4 warps (fixed order: the same results).
#include <atomic>
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/gemv_bulk.hpp"
#include "gpu/cuda/linear/gemv_bulk_ring.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_epilogue.cuh"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;
using namespace dev::gemv::bulk;

/// The bulk-copy engine and mbarrier transaction counts need sm_90: for older targets the kernel
/// traps, and the host selects it only on compute capability 9.x (cuda_tuning_for).
template <class T, int kRows, class Epi>
__global__ void __launch_bounds__(kBlockThreads, 1) gemv_bulk_kernel(const T* x, int k, const T* w, Epi epi,
                                                                      int stages, bool evict_first) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  constexpr int kUnroll = kLoadsInFlight / kRows, kRowChunks = kSlice<kRows>;
  extern __shared__ uint4 smem[];
  const ring_smem<kRows> sm(smem, stages);
  launch_dependents();
  sm.init(stages);
  const int chunks = k / 8;
  if (threadIdx.x >= kThreads) {  // the producer warp: weights only, no wait for the previous grid
    if (threadIdx.x == kThreads) produce(sm, w, size_t(k) * sizeof(T), chunks, epi, stages, evict_first);
    return;
  }
  const int tid = threadIdx.x;
  const uint4* const xv = reinterpret_cast<const uint4*>(x);
  consume<T>(sm, chunks, epi, stages, [&](int, float (&acc)[kRows][1], const uint4* st, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int cl = u * kThreads + tid, c = c0 + cl;
      if (c >= chunks) break;
      uint4 wv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r] = st[r * kRowChunks + cl];
      fma_chunk<T, kRows>(wv, __ldg(xv + c), acc);
    }
  });
#endif
}

template <class T, int kRows, class Epi>
int launch_bulk(const T* x, int k, const T* w, const Epi& epi, int groups, cudaStream_t s,
                const bulk_gemv_tuning& bulk) {
  static std::atomic<size_t> allowed{48 * 1024};  // per kernel: the dynamic shared memory it may take
  return launch_ring<ring_smem<kRows>>(gemv_bulk_kernel<T, kRows, Epi>, allowed, groups, s, bulk, x, k, w, epi);
}

}  // namespace

int gemv_bulk(act_dtype dt, const void* x, int k, const void* w, int n, float* y, cudaStream_t s,
              const bulk_gemv_tuning& bulk) {
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                             store_epilogue<4>{y, n}, (n + 3) / 4, s, bulk));
  return rc;
}

int gemv_bulk_qkv_rope(act_dtype dt, const void* x, int k, const void* w, const rope_kv_args& a, cudaStream_t s,
                       const bulk_gemv_tuning& bulk) {
  const int pairs = (a.num_heads + 2 * a.num_kv_heads) * (a.head_dim / 2);
  int rc = 0;
  if (bulk.qkv_pairs == 1)
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 2>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               qkv_rope_epilogue<1>{a}, pairs, s, bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               qkv_rope_epilogue<2>{a}, (pairs + 1) / 2, s, bulk));
  return rc;
}

int gemv_bulk_gate_up_silu(act_dtype dt, const void* x, int k, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  int rc = 0;
  if (rows_per_block == 2)
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 2>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               gate_up_epilogue<1>{act, inter}, inter, s, bulk));
  else
    AS_DISPATCH_ACT(dt, rc = launch_bulk<T, 4>(static_cast<const T*>(x), k, static_cast<const T*>(w),
                                               gate_up_epilogue<2>{act, inter}, (inter + 1) / 2, s, bulk));
  return rc;
}

}  // namespace actorserve::gpu::cuda
