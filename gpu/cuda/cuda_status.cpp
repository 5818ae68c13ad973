#include "gpu/cuda/cuda_status.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

namespace actorserve::gpu::cuda {

status cuda_status(int cuda_error, const char* what) {
  auto e = static_cast<cudaError_t>(cuda_error);
  if (e == cudaSuccess) return {};
  auto code = e == cudaErrorMemoryAllocation ? error_code::out_of_memory : error_code::internal;
  return make_error(code, fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(e), cudaGetErrorString(e), what));
}

status cublas_status(int cublas_error, const char* what) {
  auto e = static_cast<cublasStatus_t>(cublas_error);
  if (e == CUBLAS_STATUS_SUCCESS) return {};
  return make_error(error_code::internal,
                    fmt::format("cuBLAS error {} ({}) in {}", cublasGetStatusName(e), cublasGetStatusString(e), what));
}

}  // namespace actorserve::gpu::cuda
