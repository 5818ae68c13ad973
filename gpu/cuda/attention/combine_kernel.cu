// The separate merge of split-K decode pieces (split_merge::separate_kernel, or when the backend could not
// allocate its split counters): one CTA per combine runs the merge the decode kernels' last
// piece runs in place (decode_common.cuh, merge_pieces): each piece left its normalised output
// o_s and lse_s = m_s + log2(l_s) (scores in log2 units); out = sum_s 2^(lse_s - M) o_s /
// sum_s 2^(lse_s - M) with M = max_s lse_s.
#include "gpu/cuda/attention/decode_common.cuh"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int kThreads = 128;
/// Shared memory for the weights: rows x pieces at the backend's caps (launch.hpp).
constexpr int kWeightFloats = max_merge_rows * max_split_pieces;

template <class T, int D>
__global__ void __launch_bounds__(kThreads) lse_combine_kernel(attn_launch a) {
  extern __shared__ float weights[];
  if (int(blockIdx.x) >= a.counts[1]) return;
  merge_pieces<T, D, kThreads>(a, a.combines[blockIdx.x], weights, kWeightFloats, threadIdx.x);
}

template <class T, int D>
int launch(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = kWeightFloats * 4;
  static const cudaError_t configured =
      cudaFuncSetAttribute(lse_combine_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (configured != cudaSuccess) return int(configured);
  lse_combine_kernel<T, D><<<a.combine_grid, kThreads, smem, s>>>(a);
  return int(cudaGetLastError());
}

}  // namespace

int launch_lse_combine(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.combine_grid <= 0) return 0;
  const bool bf16 = dt == act_dtype::bf16;
  if (a.head_dim == 128) return bf16 ? launch<__nv_bfloat16, 128>(a, s) : launch<__half, 128>(a, s);
  if (a.head_dim == 64) return bf16 ? launch<__nv_bfloat16, 64>(a, s) : launch<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

}  // namespace actorserve::gpu::cuda
