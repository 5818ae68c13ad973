// The fused one-token FP8 GEMVs (fp8_gemv_fused.hpp) in registers: one block of 128 threads per
// group of a gemv_epilogue.cuh epilogue, its rows' dot products taken as fp8_linear_kernel.cu's
// GEMV takes them (gemv_common.cuh's accumulate over E4M3 loads; a row's sum never meets another
// row's, so the rows per block do not change it), then the epilogue with the rows' scales
// (fp8_gemv_epilogue.cuh). Where `bulk` says so the bulk-copy kernels run instead.
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_gemv_epilogue.cuh"
#include "gpu/cuda/linear/fp8_gemv_fused.hpp"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_epilogue.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;
using namespace dev::gemv;
using dev::fp8::e4m3_weights;
using dev::fp8::row_scaled;

/// Block g: the kRows weight rows of group g of `epi` against x, then epi's outputs of the group.
template <class T, int kRows, class Epi>
__global__ void __launch_bounds__(kThreads) fp8_gemv_fused_kernel(const T* x, int k, const uint8_t* q, Epi epi) {
  __shared__ partials<1, kRows> red;
  const int g = blockIdx.x;
  const uint4* wp[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wp[r] = reinterpret_cast<const uint4*>(q + size_t(epi.row(g, r)) * k);
  accumulate<T, 1, kRows, no_hook, e4m3_weights>(x, 1, k, wp, red);
  epi.template finish<T>(g, red, threadIdx.x);
}

template <class T, int kRows, class Epi>
int launch_fused(const void* x, int k, const uint8_t* q, const Epi& epi, cudaStream_t s) {
  const int groups = epi.groups();
  if (groups <= 0) return 0;
  return launch_pdl(fp8_gemv_fused_kernel<T, kRows, Epi>, dim3(groups), dim3(kThreads), s, static_cast<const T*>(x),
                    k, q, epi);
}

}  // namespace

int fp8_gemv_qkv_rope(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale,
                      const rope_kv_args& a, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_supported(x, 1, k, q)) return int(cudaErrorInvalidValue);
  if (bulk.fp8 && bulk.fp8_mma_min_rows == 1 && bulk.qkv && fp8_gemv_mma_supported(x, 1, k, q))
    return fp8_gemv_mma_qkv_rope(dt, x, k, q, scale, a, s, bulk);
  if (bulk.fp8 && bulk.qkv && fp8_gemv_bulk_supported(x, k, q))
    return fp8_gemv_bulk_qkv_rope(dt, x, k, q, scale, a, s, bulk);
  int rc = 0;
  AS_DISPATCH_ACT(dt, rc = launch_fused<T, 2>(x, k, q, row_scaled<qkv_rope_epilogue<1>>{{a}, scale}, s));
  return rc;
}

int fp8_gemv_gate_up_silu(act_dtype dt, const void* x, int k, const uint8_t* q, const float* scale, int inter,
                          void* act, int rows_per_block, cudaStream_t s, const bulk_gemv_tuning& bulk) {
  if (!fp8_gemv_supported(x, 1, k, q)) return int(cudaErrorInvalidValue);
  if (bulk.fp8 && bulk.fp8_mma_min_rows == 1 && bulk.gate_up && fp8_gemv_mma_supported(x, 1, k, q))
    return fp8_gemv_mma_gate_up_silu(dt, x, k, q, scale, inter, act, s, bulk);
  if (bulk.fp8 && bulk.gate_up && fp8_gemv_bulk_supported(x, k, q))
    return fp8_gemv_bulk_gate_up_silu(dt, x, k, q, scale, inter, act, s, bulk);
  int rc = 0;
  if (rows_per_block == 2)
    AS_DISPATCH_ACT(dt, rc = launch_fused<T, 2>(x, k, q, row_scaled<gate_up_epilogue<1>>{{act, inter}, scale}, s));
  else
    AS_DISPATCH_ACT(dt, rc = launch_fused<T, 4>(x, k, q, row_scaled<gate_up_epilogue<2>>{{act, inter}, scale}, s));
  return rc;
}

}  // namespace actorserve::gpu::cuda
