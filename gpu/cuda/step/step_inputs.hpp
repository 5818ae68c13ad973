#pragma once
/// Decode inputs staged on the device from the previous step's sampled tokens (async
/// scheduling): a step planned while the one before it ran names the token that step samples
/// (gpu::previous_token); this kernel copies it from the sampler's output buffer into the ids
/// buffer before the forward pass, so the host never waits for it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::gpu::cuda {

/// For i < n: ids[pairs[2i]] = prev_out[pairs[2i + 1]].token (pairs: (id row, sampler row)).
/// Nothing is launched when n == 0.
cudaError_t resolve_previous_tokens(int32_t* ids, const sample_out* prev_out, const int32_t* pairs, int n,
                                    cudaStream_t stream);

}  // namespace actorserve::gpu::cuda
