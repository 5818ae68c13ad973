// The gather of DeepSeek-V2's up-projected prefill attention (mla_kernels.hpp): the cached
// latents and rope keys copied into contiguous rows (the attention itself is in
// up_projected_attention_kernel.cu).
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kGatherThreads = 128;

/// Grid context of kGatherThreads: one key each.
template <class T>
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(mla_gather_args a) {
  pdl_begin();
  const int j = blockIdx.x, r = a.rank, dr = a.rope_dim, W = r + dr, H = a.num_heads, qk = a.nope_dim + dr;
  const size_t slot = size_t(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size;
  const T* src = static_cast<const T*>(a.cache) + slot * W;
  T* lat = static_cast<T*>(a.latents) + size_t(j) * r;
  for (int i = threadIdx.x; i < r; i += blockDim.x) lat[i] = src[i];
  T* k = static_cast<T*>(a.k) + size_t(j) * H * qk + a.nope_dim;
  for (int i = threadIdx.x; i < H * dr; i += blockDim.x) k[size_t(i / dr) * qk + i % dr] = src[r + i % dr];
}

}  // namespace

int mla_gather_latents(act_dtype dt, const mla_gather_args& a, cudaStream_t s) {
  if (a.context == 0) return 0;
  AS_DISPATCH_ACT(dt, return int(launch_pdl(gather_kernel<T>, dim3(a.context), dim3(kGatherThreads), s, a)));
}

}  // namespace actorserve::gpu::cuda
