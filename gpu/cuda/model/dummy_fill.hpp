#pragma once
/// `--load-format dummy` on the GPU: fills device memory with the generated weights
/// (gpu/model/dummy_weights.hpp) without staging them through the host.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/model/dummy_weights.hpp"

namespace actorserve::gpu::cuda {

/// dst[i] = the view's element i in act dtype `dt` (exact for bf16), for i < n.
int fill_dummy_act(const dummy_fill& f, act_dtype dt, void* dst, size_t n, cudaStream_t s);

/// dst[i] = the view's element i in fp32 (norm weights, biases), for i < n.
int fill_dummy_f32_device(const dummy_fill& f, float* dst, size_t n, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
