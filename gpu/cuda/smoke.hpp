#pragma once
/// The bundle's first proof that kernels and cuBLAS work on a host: y = a*x + y with our own
/// kernel and a bf16 GEMM (fp32 accumulation) through cuBLAS, both from host data.
#include <cstdint>
#include <vector>

#include "config/error.hpp"

namespace actorserve::gpu::cuda {

/// y <- a*x + y on the device; returns the new y.
result<std::vector<float>> device_axpy(float a, const std::vector<float>& x, const std::vector<float>& y);

/// C[m,n] = A[m,k] * B[k,n] (row-major), A and B rounded to bf16 on upload, fp32 result.
result<std::vector<float>> device_gemm_bf16(const std::vector<float>& a, const std::vector<float>& b,
                                            int m, int n, int k);

}  // namespace actorserve::gpu::cuda
