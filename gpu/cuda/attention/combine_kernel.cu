// Log-sum-exp merge of split-K decode pieces: each piece left its normalised output o_s and
// lse_s = m_s + log2(l_s) (scores in log2 units); out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M)
// with M = max_s lse_s.
#include <cmath>

#include "gpu/cuda/attention/tile_ops.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int kThreads = 128;

template <class T>
__global__ void __launch_bounds__(kThreads) lse_combine_kernel(attn_launch a) {
  if (int(blockIdx.x) >= a.counts[1]) return;
  const attn_combine cb = a.combines[blockIdx.x];
  const int D = a.head_dim, G = a.num_heads / a.num_kv_heads, rows = cb.q_len * G;
  for (int idx = threadIdx.x; idx < rows * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
    float M = -INFINITY;
    for (int s = 0; s < cb.num_splits; ++s)
      M = fmaxf(M, a.partial_lse[(size_t(cb.first_partial + s) * attn_tile_rows + r) * 2]);
    float W = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (M != -INFINITY) {
      for (int s = 0; s < cb.num_splits; ++s) {
        const size_t row = size_t(cb.first_partial + s) * attn_tile_rows + r;
        const float ls = a.partial_lse[row * 2];
        if (ls == -INFINITY) continue;
        const float f = exp2f(ls - M);
        W += f;
        const float4 x = *reinterpret_cast<const float4*>(a.partial_o + row * D + c);
        acc.x += x.x * f;
        acc.y += x.y * f;
        acc.z += x.z * f;
        acc.w += x.w * f;
      }
    }
    store_merged_chunk<T>(a, cb, G, D, r, c, acc, W);
  }
}

}  // namespace

int launch_lse_combine(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.combine_grid <= 0) return 0;
  if (dt == act_dtype::bf16)
    lse_combine_kernel<__nv_bfloat16><<<a.combine_grid, kThreads, 0, s>>>(a);
  else
    lse_combine_kernel<__half><<<a.combine_grid, kThreads, 0, s>>>(a);
  return int(cudaGetLastError());
}

}  // namespace actorserve::gpu::cuda
