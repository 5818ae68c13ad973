// DeepSeek-V2's latent norm and the latent cache write (mla_kernels.hpp): kv_a_proj's latent part
// normalised, its rope part rotated with every head's q_pe, the row written to the paged latent
// cache (latent_write_row.cuh); a query given in fp32 (the one-token GEMV's) is rounded to the
// activation dtype there. Every sum is in fp32; the cache and the outputs are the activation dtype.
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/mla/latent_write_row.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kNormThreads = mla_latent_row_threads;

/// Grid n of kNormThreads: one row each.
template <class T>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float* x, const float* bias, const float* weight, float eps, int width, T* out) {
  __shared__ float scratch[32];
  pdl_begin();
  const float* row = x + size_t(blockIdx.x) * width;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = row[i] + (bias ? bias[i] : 0.0f);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = row[i] + (bias ? bias[i] : 0.0f);
    out[size_t(blockIdx.x) * width + i] = from_f32<T>(weight[i] * (v * inv));
  }
}

/// Grid n of kNormThreads: one token each.
template <class T>
__global__ void __launch_bounds__(kNormThreads) latent_write_kernel(mla_latent_args a) {
  pdl_begin();
  latent_write_row<T>(a, blockIdx.x);
}

}  // namespace

int mla_rmsnorm(act_dtype dt, const float* x, const float* bias, const float* weight, float eps, int n, int width,
                void* out, cudaStream_t s) {
  if (n == 0) return 0;
  AS_DISPATCH_ACT(dt, return int(launch_pdl(rmsnorm_kernel<T>, dim3(n), dim3(kNormThreads), s, x, bias, weight, eps,
                                            width, static_cast<T*>(out))));
}

int mla_latent_write(act_dtype dt, const mla_latent_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (a.rope_dim % 2 != 0 || a.rope_dim > mla_max_rope_dim) return int(cudaErrorInvalidValue);
  AS_DISPATCH_ACT(dt, return int(launch_pdl(latent_write_kernel<T>, dim3(a.n), dim3(kNormThreads), s, a)));
}

}  // namespace actorserve::gpu::cuda
