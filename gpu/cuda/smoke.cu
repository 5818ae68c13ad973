#include "gpu/cuda/smoke.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gpu/cuda/cuda_status.hpp"

namespace actorserve::gpu::cuda {
namespace {

__global__ void axpy_kernel(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

template <class T>
struct device_buffer {
  T* ptr = nullptr;
  ~device_buffer() { if (ptr) cudaFree(ptr); }
  cudaError_t alloc(size_t n) { return cudaMalloc(&ptr, n * sizeof(T)); }
};

}  // namespace

result<std::vector<float>> device_axpy(float a, const std::vector<float>& x, const std::vector<float>& y) {
  const int n = static_cast<int>(x.size());
  device_buffer<float> dx, dy;
  AS_CUDA_TRY(dx.alloc(n));
  AS_CUDA_TRY(dy.alloc(n));
  AS_CUDA_TRY(cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  AS_CUDA_TRY(cudaMemcpy(dy.ptr, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  axpy_kernel<<<(n + 255) / 256, 256>>>(a, dx.ptr, dy.ptr, n);
  AS_CUDA_TRY(cudaGetLastError());
  std::vector<float> out(n);
  AS_CUDA_TRY(cudaMemcpy(out.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

result<std::vector<float>> device_gemm_bf16(const std::vector<float>& a, const std::vector<float>& b,
                                            int m, int n, int k) {
  device_buffer<float> fa, fb, c;
  device_buffer<__nv_bfloat16> ha, hb;
  AS_CUDA_TRY(fa.alloc(size_t(m) * k));
  AS_CUDA_TRY(fb.alloc(size_t(k) * n));
  AS_CUDA_TRY(ha.alloc(size_t(m) * k));
  AS_CUDA_TRY(hb.alloc(size_t(k) * n));
  AS_CUDA_TRY(c.alloc(size_t(m) * n));
  AS_CUDA_TRY(cudaMemcpy(fa.ptr, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  AS_CUDA_TRY(cudaMemcpy(fb.ptr, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  to_bf16_kernel<<<(m * k + 255) / 256, 256>>>(fa.ptr, ha.ptr, m * k);
  to_bf16_kernel<<<(k * n + 255) / 256, 256>>>(fb.ptr, hb.ptr, k * n);
  AS_CUDA_TRY(cudaGetLastError());
  cublasHandle_t handle = nullptr;
  AS_CUBLAS_TRY(cublasCreate(&handle));
  // Row-major C = A*B is column-major C^T = B^T * A^T.
  const float alpha = 1.0f, beta = 0.0f;
  auto st = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, hb.ptr, CUDA_R_16BF, n,
                         ha.ptr, CUDA_R_16BF, k, &beta, c.ptr, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
  cublasDestroy(handle);
  AS_CUBLAS_TRY(st);
  std::vector<float> out(size_t(m) * n);
  AS_CUDA_TRY(cudaMemcpy(out.data(), c.ptr, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace actorserve::gpu::cuda
