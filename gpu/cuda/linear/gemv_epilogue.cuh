#pragma once
// Epilogues of the one-token GEMVs that loop over groups of weight rows (gemv_bulk_kernel.cu;
// with FP8 weights fp8_gemv_fused_kernel.cu and fp8_gemv_bulk_kernel.cu, through
// fp8_gemv_epilogue.cuh's row scaling): which rows group g holds, and what is written once the
// rows' dot products are reduced. finish reads row r's dot product as red.total(r, 0) from any
// `Red` that has total (partials, or the row-scaled totals of FP8 weights). Each matches the
// epilogue of the matching gemv_kernel.cu kernel exactly.
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::gpu::cuda::dev::gemv {

/// Epilogue of the QKV projection: group g holds the rotary pairs p = g * kPairs + j (j < kPairs),
/// pair p being columns (i, i + D/2) of head p / (D/2), i = p % (D/2); rows j and kPairs + j.
template <int kPairs = 1>
struct qkv_rope_epilogue {
  rope_kv_args a;
  __host__ __device__ __forceinline__ int pairs() const {
    return (a.num_heads + 2 * a.num_kv_heads) * (a.head_dim / 2);
  }
  __host__ __device__ __forceinline__ int groups() const { return (pairs() + kPairs - 1) / kPairs; }
  __device__ __forceinline__ int row(int g, int r) const {
    const int half = a.head_dim / 2, p = min(g * kPairs + r % kPairs, pairs() - 1);
    return (p / half) * a.head_dim + p % half + (r / kPairs) * half;
  }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    const int half = a.head_dim / 2, p = g * kPairs + tid;
    if (tid < kPairs && p < pairs())
      qkv_rope_store<T>(a, p / half, p % half, red.total(tid, 0), red.total(kPairs + tid, 0));
  }
};

/// Epilogue of the gate/up projection: group g holds gate rows j = g * kPairs + r and their up rows.
template <int kPairs>
struct gate_up_epilogue {
  void* act;
  int inter;
  __host__ __device__ __forceinline__ int groups() const { return (inter + kPairs - 1) / kPairs; }
  __device__ __forceinline__ int row(int g, int r) const {
    const int j = min(g * kPairs + r % kPairs, inter - 1);
    return r < kPairs ? j : inter + j;
  }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    const int r = tid, j = g * kPairs + r;
    if (r >= kPairs || j >= inter) return;
    const float gv = red.total(r, 0), u = red.total(kPairs + r, 0);
    static_cast<T*>(act)[j] = silu_mul<T>(gv, u);
  }
};

/// Plain fp32 outputs: group g holds rows g * kRows + r.
template <int kRows>
struct store_epilogue {
  float* y;
  int n;
  __host__ __device__ __forceinline__ int groups() const { return (n + kRows - 1) / kRows; }
  __device__ __forceinline__ int row(int g, int r) const { return min(g * kRows + r, n - 1); }
  template <class T, class Red>
  __device__ __forceinline__ void finish(int g, const Red& red, int tid) const {
    const int r = tid, row = g * kRows + r;
    if (r < kRows && row < n) y[row] = red.total(r, 0);
  }
};

}  // namespace actorserve::gpu::cuda::dev::gemv
