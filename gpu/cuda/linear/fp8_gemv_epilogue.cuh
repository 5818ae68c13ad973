#pragma once
// The epilogues of the fused one-token FP8 GEMVs (fp8_gemv_fused.hpp: fp8_gemv_fused_kernel.cu's
// register kernel, fp8_gemv_bulk_kernel.cu's bulk-copy kernel): a gemv_epilogue.cuh epilogue (QKV
// + rope + KV write, gate/up + SiLU) that sees each row's dot product times its weight row's scale,
// rounded as fp8_gemv rounds it (scaled_sum<per_row>). From fp8_gemv's sums the outputs are then
// what fp8_gemv followed by rope_kv_write or silu_and_mul writes, bit for bit.
#include "gpu/cuda/linear/fp8_gemv.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/linear/gemv_epilogue.cuh"

namespace actorserve::gpu::cuda::dev::fp8 {

/// The dot products `red` of group g's rows (rows of epilogue Epi), each times its row's scale.
template <class Red, class Epi>
struct row_scaled_totals {
  const Red& red;
  const Epi& epi;
  const float* scale;
  int g;
  __device__ __forceinline__ float total(int r, int i) const {
    return scaled_sum<fp8_scale_mode::per_row>(red.total(r, i), scale, epi.row(g, r));
  }
};

/// Epilogue Epi over E4M3 weights with one scale per row: Epi's groups and rows; its finish sees
/// each row's dot product times the row's scale. No scale applies inside a row's dot product.
template <class Epi>
struct row_scaled {
  static constexpr bool kBlockScaled = false;
  Epi epi;
  const float* scale;  ///< [rows of the weight]
  __host__ __device__ __forceinline__ int groups() const { return epi.groups(); }
  __device__ __forceinline__ int row(int g, int r) const { return epi.row(g, r); }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    epi.template finish<T>(g, row_scaled_totals<Red, Epi>{red, epi, scale, g}, tid);
  }
};

}  // namespace actorserve::gpu::cuda::dev::fp8
