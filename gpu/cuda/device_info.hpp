#pragma once
/// Which CUDA devices this process can use. Safe to call without a driver: reports zero devices.
#include <string>

#include "config/error.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

struct device_properties {
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
};

/// Number of usable CUDA devices; 0 when there is no GPU or no driver.
int device_count();
device_properties properties(int device);

/// The current device's compute capability and the target of the kernel code loaded for it
/// (a kernel's attributes: code_target.cu; no launch). Refuses a device below compute capability
/// 8.0, and one this build has no kernels for, with a message that names the device.
result<gpu_target> current_gpu_target();
/// current_gpu_target() of the first device asked, kept for the process (the executor drives one
/// GPU); all zero where it was refused. The launchers check it before a Hopper-only kernel, so a
/// choice made without the executor (a test, a benchmark) never runs one the GPU lacks.
const gpu_target& loaded_gpu_target();

}  // namespace actorserve::gpu::cuda
