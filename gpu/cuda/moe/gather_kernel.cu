// The per-expert cuBLAS path's gather (moe_kernels.hpp): the tokens' rows copied into permuted
// order, 16 bytes a thread, one block a row.
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kThreads = 128;

/// Grid: one block per permuted row; `chunks` 16-byte chunks a row.
__global__ void __launch_bounds__(kThreads) gather_kernel(moe_gather_args a, int chunks) {
  pdl_begin();
  const size_t r = blockIdx.x, src = size_t(a.rows[r] / a.rows_div);
  const uint4* in = static_cast<const uint4*>(a.x) + src * chunks;
  uint4* out = static_cast<uint4*>(a.out) + r * chunks;
  for (int c = threadIdx.x; c < chunks; c += kThreads) out[c] = in[c];
}

}  // namespace

int moe_gather(act_dtype dt, const moe_gather_args& a, cudaStream_t s) {
  if (a.num_rows == 0) return 0;
  const size_t row_bytes = size_t(a.width) * act_size(dt);
  if (a.width % 8 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.out) % 16 != 0)
    return int(cudaErrorInvalidValue);
  return int(launch_pdl(gather_kernel, dim3(unsigned(a.num_rows)), dim3(kThreads), s, a, int(row_bytes / 16)));
}

}  // namespace actorserve::gpu::cuda
