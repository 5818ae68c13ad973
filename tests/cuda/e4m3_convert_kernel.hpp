#pragma once
// A test kernel over the FP8-cache kernels' in-register E4M3 conversion (fp8_tiles.cuh).
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::testing {

/// Converts every E4M3 code with attn_dev::e4m3x4_to to `dt` (bf16 or fp16) on the device: word
/// i (i = 0..255) holds codes i, i + 1, i + 2, i + 3 (mod 256), and out[4 i + j] (256 x 4 values
/// of device memory) gets the bits of code i + j. Returns the cudaError_t of the launch and sync.
int convert_all_e4m3_codes(gpu::cuda::act_dtype dt, uint16_t* out);

}  // namespace actorserve::testing
