#pragma once
/// CUDA and cuBLAS return codes as the project's `status`. Launchers return a status; nothing
/// in gpu/cuda throws.
#include <string>

#include "config/error.hpp"

namespace actorserve::gpu::cuda {

/// Converts a cudaError_t (passed as int to keep cuda_runtime.h out of this header).
status cuda_status(int cuda_error, const char* what);
/// Converts a cublasStatus_t.
status cublas_status(int cublas_error, const char* what);

}  // namespace actorserve::gpu::cuda

#define AS_CUDA_TRY(expr)                                                       \
  do {                                                                          \
    if (auto st_ = ::actorserve::gpu::cuda::cuda_status((expr), #expr); !st_)   \
      return st_.err();                                                         \
  } while (0)

#define AS_CUBLAS_TRY(expr)                                                     \
  do {                                                                          \
    if (auto st_ = ::actorserve::gpu::cuda::cublas_status((expr), #expr); !st_) \
      return st_.err();                                                         \
  } while (0)
