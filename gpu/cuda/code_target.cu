// The target of the kernel code the driver loaded for the current GPU: which of the machine code
// images (or the PTX it compiled) ACTORSERVE_CUDA_ARCHITECTURES put into the build runs on it.
// Read from a kernel's attributes, never by a launch, so it may be asked during a graph capture.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/device_info.hpp"

namespace actorserve::gpu::cuda {
namespace {

// Its PTX target is the loaded code's (cudaFuncAttributes::ptxVersion); its launch bound tells
// sm_90a code (64 threads) from the rest (32).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AS_CODE_TARGET_THREADS 64
#else
#define AS_CODE_TARGET_THREADS 32
#endif
__global__ void __launch_bounds__(AS_CODE_TARGET_THREADS) code_target_kernel() {}
#undef AS_CODE_TARGET_THREADS

}  // namespace

result<gpu_target> current_gpu_target() {
  int dev = 0;
  AS_CUDA_TRY(cudaGetDevice(&dev));
  const device_properties p = properties(dev);
  gpu_target t;
  t.sm_major = p.sm_major;
  t.sm_minor = p.sm_minor;
  if (p.sm_major < kMinSmMajor)
    return make_error(error_code::unsupported,
                      fmt::format("CUDA device {} ({}) has compute capability {}.{}; the CUDA executor needs 8.0 "
                                  "or newer (Ampere, Ada, Hopper and later)",
                                  dev, p.name, p.sm_major, p.sm_minor));
  cudaFuncAttributes fa{};
  const cudaError_t e = cudaFuncGetAttributes(&fa, code_target_kernel);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
      e == cudaErrorUnsupportedPtxVersion) {
    (void)cudaGetLastError();
    return make_error(error_code::unsupported,
                      fmt::format("this build has no kernels for CUDA device {} ({}, compute capability {}.{}): "
                                  "rebuild with {}{} in ACTORSERVE_CUDA_ARCHITECTURES (docs/gpus.md)",
                                  dev, p.name, p.sm_major, p.sm_minor, p.sm_major, p.sm_minor));
  }
  AS_CUDA_TRY(e);
  t.code_arch = fa.ptxVersion;
  t.code_sm90a = fa.maxThreadsPerBlock == 64;
  return t;
}

const gpu_target& loaded_gpu_target() {
  static const gpu_target t = [] {
    auto r = current_gpu_target();
    if (r) return r.value();
    (void)cudaGetLastError();
    return gpu_target{0, 0, 0, false};
  }();
  return t;
}

}  // namespace actorserve::gpu::cuda
