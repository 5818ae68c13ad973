#pragma once
/// Which CUDA devices this process can use. Safe to call without a driver: reports zero devices.
#include <string>

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

}  // namespace actorserve::gpu::cuda
